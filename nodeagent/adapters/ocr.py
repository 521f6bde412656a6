"""document.ocr: one page image → its text lines with boxes, over PP-OCR's detector and recogniser.

OCR is two models in a row, so it is two `CapabilityAdapter`s (ocr_detection, ocr_recognition),
each run through `run_rows` on its own runtime; `OcrPipeline` chains them for one page and
validates the assembled `OcrOutput` against the contract. The angle classifier that PP-OCR ships
is not used: pages are served upright.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from nodeagent.adapters.base import CapabilityAdapter, invalid_output, run_rows
from nodeagent.adapters.imaging import MAX_SIDE_PX, RgbImage, decode_base64_image
from nodeagent.adapters.ocr_detection import DetectionConfig, TextBox, TextDetectionAdapter, reading_order
from nodeagent.adapters.ocr_recognition import (
    RecognitionConfig,
    RecognizedLine,
    TextRecognitionAdapter,
    load_vocabulary,
)
from nodeagent.runtimes.base import Runtime
from streams.contracts import OcrBlock, OcrInput, OcrOutput

MAX_TEXT_CHARS = 1_000_000  # docs/reference-behaviour.md §3


@dataclass(frozen=True)
class OcrConfig:
    detection_file: str = "det.onnx"
    recognition_file: str = "rec.onnx"
    keys_file: str = "keys.txt"
    use_space_char: bool = True
    text_score: float = 0.5  # lines recognised with less confidence are dropped
    recognition_batch: int = 8
    detection: DetectionConfig = field(default_factory=DetectionConfig)
    recognition: RecognitionConfig = field(default_factory=RecognitionConfig)

    @classmethod
    def from_file(cls, path: Path) -> OcrConfig:
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        return cls(
            **_known(cls, data, exclude={"detection", "recognition"}),
            detection=DetectionConfig(**_tupled(_known(DetectionConfig, data.get("detection", {})))),
            recognition=RecognitionConfig(**_tupled(_known(RecognitionConfig, data.get("recognition", {})))),
        )


def _known(
    cls: type, data: dict[str, Any], exclude: frozenset[str] | set[str] = frozenset()
) -> dict[str, Any]:
    names = {f.name for f in fields(cls)} - set(exclude)
    return {name: value for name, value in data.items() if name in names}


def _tupled(values: dict[str, Any]) -> dict[str, Any]:
    # JSON has lists where the frozen configs keep tuples (mean, std).
    return {name: tuple(value) if isinstance(value, list) else value for name, value in values.items()}


class OcrPipeline:
    capability = "document.ocr"

    def __init__(self, vocabulary: tuple[str, ...], config: OcrConfig) -> None:
        self.config = config
        # Annotated with the protocol so that mypy checks both stages conform to it.
        self.detection: CapabilityAdapter[RgbImage, list[TextBox]] = TextDetectionAdapter(config.detection)
        self.recognition: CapabilityAdapter[RgbImage, RecognizedLine] = TextRecognitionAdapter(
            vocabulary, config.recognition
        )

    @classmethod
    def from_model_dir(cls, model_dir: Path, config_file: str = "serving_config.json") -> OcrPipeline:
        config = OcrConfig.from_file(model_dir / config_file)
        vocabulary = load_vocabulary(model_dir / config.keys_file, use_space_char=config.use_space_char)
        return cls(vocabulary, config)

    def model_paths(self, model_dir: Path) -> tuple[Path, Path]:
        return model_dir / self.config.detection_file, model_dir / self.config.recognition_file

    def recognize(self, request: OcrInput, detector: Runtime, recognizer: Runtime) -> OcrOutput:
        """Decode the page, find its lines, read them, assemble and validate the output. Blocking."""
        page = decode_base64_image(request.image_base64)
        output = self.recognize_page(page, detector, recognizer)
        validate_ocr_output(output, width=page.shape[1], height=page.shape[0])
        return output

    def recognize_page(self, page: RgbImage, detector: Runtime, recognizer: Runtime) -> OcrOutput:
        (boxes,) = run_rows(self.detection, detector, [page])
        lines = reading_order(boxes)
        ordered = [box for line in lines for box in line]
        crops = [_crop(page, box) for box in ordered]
        # Similar widths batch together, so little of each batch is padding.
        order = sorted(range(len(crops)), key=lambda i: crops[i].shape[1] / crops[i].shape[0])
        recognized: dict[int, RecognizedLine] = {}
        step = max(1, self.config.recognition_batch)
        for start in range(0, len(order), step):
            chunk = order[start : start + step]
            chunk_lines = run_rows(self.recognition, recognizer, [crops[i] for i in chunk])
            recognized.update(zip(chunk, chunk_lines, strict=True))
        blocks: list[OcrBlock] = []
        line_texts: list[str] = []
        position = 0
        for line in lines:
            words: list[str] = []
            for box in line:
                read = recognized[position]
                position += 1
                if read.text and read.confidence >= self.config.text_score:
                    blocks.append(OcrBlock(read.text, (box.x0, box.y0, box.x1, box.y1), read.confidence))
                    words.append(read.text)
            if words:
                line_texts.append(" ".join(words))
        return OcrOutput(text="\n".join(line_texts), blocks=blocks)


def _crop(page: RgbImage, box: TextBox) -> RgbImage:
    x0, y0 = max(0, math.floor(box.x0)), max(0, math.floor(box.y0))
    x1, y1 = min(page.shape[1], math.ceil(box.x1)), min(page.shape[0], math.ceil(box.y1))
    return np.ascontiguousarray(page[y0 : max(y1, y0 + 1), x0 : max(x1, x0 + 1)])


def validate_ocr_output(output: OcrOutput, *, width: int, height: int) -> None:
    """INVALID_OUTPUT unless the text is bounded and every block is non-empty, on the page and scored 0..1."""
    if not (1 <= width <= MAX_SIDE_PX and 1 <= height <= MAX_SIDE_PX):
        raise invalid_output(f"page size {width}x{height} is outside 1..{MAX_SIDE_PX}")
    if not isinstance(output.text, str) or len(output.text) > MAX_TEXT_CHARS:
        raise invalid_output(f"OCR text must be a string of at most {MAX_TEXT_CHARS} characters")
    for index, block in enumerate(output.blocks):
        if not isinstance(block.text, str) or not block.text:
            raise invalid_output(f"block {index} has no text")
        x0, y0, x1, y1 = block.bbox
        if not all(math.isfinite(v) for v in block.bbox) or not (
            0 <= x0 <= x1 <= width and 0 <= y0 <= y1 <= height
        ):
            raise invalid_output(f"block {index} box {block.bbox} is not inside the {width}x{height} page")
        if not (math.isfinite(block.confidence) and 0.0 <= block.confidence <= 1.0):
            raise invalid_output(f"block {index} confidence {block.confidence} is not in 0..1")
