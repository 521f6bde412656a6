"""document.ocr over the real PP-OCRv4 detector and recogniser from the rapidocr-onnxruntime wheel."""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Iterator
from pathlib import Path

import msgspec
import numpy as np
import pytest
from PIL import Image

from artifacts.hashing import sha256_of_file
from artifacts.manifest import build_manifest
from nodeagent.adapters.ctc import greedy_ctc, tokens_to_text
from nodeagent.adapters.ocr import OcrPipeline, validate_ocr_output
from nodeagent.adapters.ocr_detection import DetectionConfig, boxes_from_probability_map
from nodeagent.adapters.ocr_recognition import BLANK, load_vocabulary
from nodeagent.models.ocr import locate_ppocr_sources, pull_ppocr
from nodeagent.runtimes.base import RuntimeOptions
from nodeagent.runtimes.onnx import OnnxRuntimeCpu
from streams.codes import ServingError
from streams.contracts import OcrBlock, OcrInput, OcrOutput
from tests.support.images import text_page

LINES = ["Invoice number 4821", "Shipping to Berlin", "Total due: 37 EUR"]


@pytest.fixture(scope="module")
def ppocr_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Installs rapidocr-onnxruntime (--no-deps) when it is missing, like the MiniLM pull does.
    return pull_ppocr(tmp_path_factory.mktemp("models") / "pp-ocrv4")


@pytest.fixture(scope="module")
def pipeline(ppocr_dir: Path) -> OcrPipeline:
    return OcrPipeline.from_model_dir(ppocr_dir)


@pytest.fixture(scope="module")
def runtimes(pipeline: OcrPipeline, ppocr_dir: Path) -> Iterator[tuple[OnnxRuntimeCpu, OnnxRuntimeCpu]]:
    detector, recognizer = OnnxRuntimeCpu(), OnnxRuntimeCpu()
    detection_path, recognition_path = pipeline.model_paths(ppocr_dir)
    detector.load(detection_path, RuntimeOptions(intra_op_threads=2))
    recognizer.load(recognition_path, RuntimeOptions(intra_op_threads=2))
    yield detector, recognizer
    detector.unload()
    recognizer.unload()


def _words_found(expected: list[str], text: str) -> float:
    words = [word.lower() for line in expected for word in line.split()]
    found = text.lower()
    return sum(word in found for word in words) / len(words)


def _read(pipeline: OcrPipeline, runtimes: tuple[OnnxRuntimeCpu, OnnxRuntimeCpu], image: str) -> OcrOutput:
    return pipeline.recognize(OcrInput(image_base64=image), *runtimes)


def test_rendered_text_is_read_back(
    pipeline: OcrPipeline, runtimes: tuple[OnnxRuntimeCpu, OnnxRuntimeCpu]
) -> None:
    output = _read(pipeline, runtimes, text_page(LINES)[0])
    assert _words_found(LINES, output.text) >= 0.8, output.text


def test_each_line_is_a_block_in_reading_order_with_its_box(
    pipeline: OcrPipeline, runtimes: tuple[OnnxRuntimeCpu, OnnxRuntimeCpu]
) -> None:
    image, centres = text_page(LINES)
    output = _read(pipeline, runtimes, image)
    assert len(output.blocks) == len(LINES)
    assert output.text.count("\n") == len(LINES) - 1
    for block, centre, line in zip(output.blocks, centres, LINES, strict=True):
        x0, y0, x1, y1 = block.bbox
        assert y0 < centre < y1
        assert 30 <= x0 <= 70
        assert x1 > x0 + 200
        assert 0.5 <= block.confidence <= 1.0
        assert _words_found([line], block.text) >= 0.6, block.text


def test_a_jpeg_page_is_read_too(
    pipeline: OcrPipeline, runtimes: tuple[OnnxRuntimeCpu, OnnxRuntimeCpu]
) -> None:
    output = _read(pipeline, runtimes, text_page(LINES[:1], "JPEG")[0])
    assert _words_found(LINES[:1], output.text) >= 0.6, output.text


def test_a_blank_page_has_no_text(
    pipeline: OcrPipeline, runtimes: tuple[OnnxRuntimeCpu, OnnxRuntimeCpu]
) -> None:
    assert _read(pipeline, runtimes, text_page([])[0]) == OcrOutput(text="", blocks=[])


def test_output_round_trips_through_the_contract_json(
    pipeline: OcrPipeline, runtimes: tuple[OnnxRuntimeCpu, OnnxRuntimeCpu]
) -> None:
    output = _read(pipeline, runtimes, text_page(LINES[:1])[0])
    assert msgspec.json.decode(msgspec.json.encode(output), type=OcrOutput) == output


@pytest.mark.parametrize(
    "payload",
    ["*** not base64", base64.b64encode(b"\xff\xd8\xff\xe0 broken jpeg").decode(), ""],
    ids=["bad-base64", "broken-jpeg", "empty"],
)
def test_undecodable_images_are_invalid_input(
    pipeline: OcrPipeline, runtimes: tuple[OnnxRuntimeCpu, OnnxRuntimeCpu], payload: str
) -> None:
    with pytest.raises(ServingError) as raised:
        _read(pipeline, runtimes, payload)
    assert raised.value.code == "INVALID_INPUT"


def test_a_page_over_4096_pixels_is_invalid_input(
    pipeline: OcrPipeline, runtimes: tuple[OnnxRuntimeCpu, OnnxRuntimeCpu]
) -> None:
    buffer = io.BytesIO()
    Image.new("L", (10, 4097), 255).save(buffer, "PNG")
    with pytest.raises(ServingError) as raised:
        _read(pipeline, runtimes, base64.b64encode(buffer.getvalue()).decode())
    assert raised.value.code == "INVALID_INPUT"


@pytest.mark.parametrize(
    "block",
    [
        OcrBlock("x", (10.0, 10.0, 700.0, 20.0), 0.9),  # wider than the page
        OcrBlock("x", (10.0, 30.0, 20.0, 20.0), 0.9),  # upside down
        OcrBlock("x", (10.0, 10.0, 20.0, 20.0), float("nan")),
        OcrBlock("x", (10.0, 10.0, 20.0, 20.0), 1.5),
        OcrBlock("", (10.0, 10.0, 20.0, 20.0), 0.9),
    ],
    ids=["outside", "inverted", "nan-confidence", "confidence-over-1", "empty-text"],
)
def test_blocks_that_break_the_contract_are_invalid_output(block: OcrBlock) -> None:
    with pytest.raises(ServingError) as raised:
        validate_ocr_output(OcrOutput(text="x", blocks=[block]), width=640, height=480)
    assert raised.value.code == "INVALID_OUTPUT"


def test_text_over_a_million_characters_is_invalid_output() -> None:
    with pytest.raises(ServingError) as raised:
        validate_ocr_output(OcrOutput(text="x" * 1_000_001, blocks=[]), width=640, height=480)
    assert raised.value.code == "INVALID_OUTPUT"


def test_non_finite_detection_maps_are_invalid_output(pipeline: OcrPipeline) -> None:
    batch = pipeline.detection.preprocess([np.full((64, 64, 3), 255, dtype=np.uint8)])
    height, width = batch.feeds["x"].shape[2:]
    with pytest.raises(ServingError) as raised:
        pipeline.detection.postprocess(batch, {"map": np.full((1, 1, height, width), np.nan, np.float32)})
    assert raised.value.code == "INVALID_OUTPUT"


def test_recognition_scores_over_another_dictionary_are_invalid_output(pipeline: OcrPipeline) -> None:
    batch = pipeline.recognition.preprocess([np.full((48, 100, 3), 255, dtype=np.uint8)])
    with pytest.raises(ServingError) as raised:
        pipeline.recognition.postprocess(batch, {"scores": np.zeros((1, 40, 97), np.float32)})
    assert raised.value.code == "INVALID_OUTPUT"


def test_probability_blobs_become_scored_unclipped_boxes() -> None:
    probability = np.zeros((100, 200), dtype=np.float32)
    probability[10:20, 10:110] = 0.9  # a confident line
    probability[50:60, 20:80] = 0.95  # another
    probability[80:90, 150:190] = 0.35  # above the pixel threshold, below the box threshold
    boxes = sorted(boxes_from_probability_map(probability, DetectionConfig()), key=lambda b: b.y0)
    assert len(boxes) == 2
    first, second = boxes
    margin = 101 * 11 * 1.6 / (2 * (101 + 11))  # the 2x2 dilation grows each blob by one pixel
    assert (first.x0, first.y0) == pytest.approx((10 - margin, 10 - margin))
    assert (first.x1, first.y1) == pytest.approx((111 + margin, 21 + margin))
    assert first.score == pytest.approx(0.9, abs=0.1)
    assert second.y0 < 50 < 60 < second.y1


def test_greedy_ctc_merges_repeats_and_drops_blanks() -> None:
    vocabulary = [BLANK, "a", "b"]
    steps = [1, 1, 0, 1, 2, 2, 0, 0]  # a a _ a b b _ _ → "aab"
    scores = np.eye(3, dtype=np.float32)[steps] * 0.9
    tokens = greedy_ctc(scores, blank=0)
    assert tokens_to_text(tokens, vocabulary) == "aab"
    assert [(t.first_step, t.last_step) for t in tokens] == [(0, 1), (3, 3), (4, 5)]
    assert tokens_to_text(greedy_ctc(scores, blank=0, steps=4), vocabulary) == "aa"


def test_pull_writes_a_servable_directory_with_a_clean_manifest(ppocr_dir: Path) -> None:
    assert sorted(p.name for p in ppocr_dir.iterdir()) == [
        "cls.onnx",
        "det.onnx",
        "keys.txt",
        "rec.onnx",
        "serving_config.json",
    ]
    config = json.loads((ppocr_dir / "serving_config.json").read_text(encoding="utf-8"))
    assert config["capability"] == "document.ocr"
    vocabulary = load_vocabulary(ppocr_dir / "keys.txt")
    assert len(vocabulary) == 6625  # blank + 6623 dictionary characters + space: the model's classes
    assert vocabulary[0] == BLANK
    assert vocabulary[-1] == " "
    manifest = build_manifest(ppocr_dir)
    assert manifest.risk_flags == ()
    assert len(manifest.files) == 5


def test_pull_copies_the_wheel_models_unchanged_and_is_idempotent(ppocr_dir: Path) -> None:
    sources = locate_ppocr_sources(install_missing=False)
    assert sha256_of_file(ppocr_dir / "det.onnx") == sha256_of_file(sources["detection"])
    assert sha256_of_file(ppocr_dir / "rec.onnx") == sha256_of_file(sources["recognition"])
    before = {p.name: p.stat().st_mtime_ns for p in ppocr_dir.iterdir()}
    assert pull_ppocr(ppocr_dir, install_missing=False) == ppocr_dir
    assert {p.name: p.stat().st_mtime_ns for p in ppocr_dir.iterdir()} == before
