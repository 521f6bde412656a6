"""vision.embedding over generated ONNX image encoders (no small real one ships in a wheel).

The generated encoders are real convolutional graphs run by ONNX Runtime: a strided convolution,
ReLU, then either global average pooling and a projection (pooled output) or a reshape into
patch tokens (token-state output the adapter pools).
"""

from __future__ import annotations

import base64
import io
from pathlib import Path

import msgspec
import numpy as np
import onnxruntime as ort
import pytest
from PIL import Image

from nodeagent.adapters.base import run_rows
from nodeagent.adapters.imaging import to_chw_float
from nodeagent.adapters.vision import (
    CLIP_MEAN,
    CLIP_STD,
    VisionEmbeddingAdapter,
    VisionEmbeddingConfig,
    vision_output,
)
from nodeagent.runtimes.base import RuntimeOptions
from nodeagent.runtimes.onnx import OnnxRuntimeCpu
from streams.codes import ServingError
from streams.contracts import VisionEmbeddingOutput
from tests.support.vision import (
    CHANNELS,
    DIMENSION,
    SIZE,
    encode_image,
    gradient,
    write_tiny_image_encoder,
    write_tiny_vision_model,
)


def _runtime(path: Path) -> OnnxRuntimeCpu:
    runtime = OnnxRuntimeCpu()
    runtime.load(path, RuntimeOptions(intra_op_threads=1))
    return runtime


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("vision")
    write_tiny_vision_model(root)
    return root


@pytest.fixture(scope="module")
def adapter(model_dir: Path) -> VisionEmbeddingAdapter:
    return VisionEmbeddingAdapter.from_model_dir(model_dir)


@pytest.fixture(scope="module")
def runtime(model_dir: Path) -> OnnxRuntimeCpu:
    return _runtime(model_dir / "model.onnx")


def test_vectors_are_unit_length_with_the_configured_dimension(
    adapter: VisionEmbeddingAdapter, runtime: OnnxRuntimeCpu
) -> None:
    results = run_rows(
        adapter, runtime, [encode_image(gradient(64, 48)), encode_image(gradient(40, 90, flip=True))]
    )
    assert [r.vector.shape for r in results] == [(DIMENSION,), (DIMENSION,)]
    assert [round(float(np.linalg.norm(r.vector)), 5) for r in results] == [1.0, 1.0]


def test_adapter_equals_direct_onnxruntime_with_clip_normalisation(
    adapter: VisionEmbeddingAdapter, runtime: OnnxRuntimeCpu, model_dir: Path
) -> None:
    image = gradient(SIZE, SIZE)  # already the model's size: no resize, no crop
    pixels = (np.asarray(image, dtype=np.float32) / 255.0 - np.asarray(CLIP_MEAN)) / np.asarray(CLIP_STD)
    session = ort.InferenceSession(str(model_dir / "model.onnx"), providers=["CPUExecutionProvider"])
    (raw,) = session.run(None, {"pixel_values": pixels.transpose(2, 0, 1)[None].astype(np.float32)})
    expected = raw[0] / np.linalg.norm(raw[0])
    (result,) = run_rows(adapter, runtime, [encode_image(image)])
    np.testing.assert_allclose(result.vector, expected, atol=1e-5)


def test_the_shortest_side_is_resized_and_the_centre_cropped(adapter: VisionEmbeddingAdapter) -> None:
    wide = np.zeros((50, 150, 3), dtype=np.uint8)
    wide[:, 50:100] = 255  # the white centre third survives the crop, the black sides do not
    batch = adapter.preprocess([encode_image(Image.fromarray(wide))])
    white = to_chw_float(np.full((1, 1, 3), 255, dtype=np.uint8), CLIP_MEAN, CLIP_STD)[:, 0, 0]
    pixels = batch.feeds["pixel_values"]
    assert pixels.shape == (1, 3, SIZE, SIZE)
    np.testing.assert_allclose(pixels[0, :, SIZE // 2, SIZE // 2], white, atol=1e-5)
    np.testing.assert_allclose(pixels[0, :, SIZE // 2, 2], white, atol=0.2)


def test_png_and_jpeg_of_one_picture_embed_alike(
    adapter: VisionEmbeddingAdapter, runtime: OnnxRuntimeCpu
) -> None:
    image = gradient(96, 96)
    png, jpeg = run_rows(adapter, runtime, [encode_image(image), encode_image(image, "JPEG")])
    different = run_rows(adapter, runtime, [encode_image(gradient(96, 96, flip=True))])[0]
    assert float(png.vector @ jpeg.vector) > 0.999
    assert float(png.vector @ different.vector) < float(png.vector @ jpeg.vector)


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_token_states_are_pooled_then_normalised(tmp_path: Path, pooling: str) -> None:
    path = tmp_path / "tokens.onnx"
    write_tiny_image_encoder(path, output="tokens")
    config = VisionEmbeddingConfig(dimension=CHANNELS, image_size=SIZE, pooling=pooling)
    adapter = VisionEmbeddingAdapter(config)
    batch = adapter.preprocess([encode_image(gradient(SIZE, SIZE))])
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (tokens,) = session.run(None, dict(batch.feeds))
    pooled = tokens[0, 0] if pooling == "cls" else tokens[0].mean(axis=0)
    (result,) = run_rows(adapter, _runtime(path), [encode_image(gradient(SIZE, SIZE))])
    np.testing.assert_allclose(result.vector, pooled / np.linalg.norm(pooled), atol=1e-5)


def test_output_round_trips_through_the_contract_json(
    adapter: VisionEmbeddingAdapter, runtime: OnnxRuntimeCpu
) -> None:
    output = vision_output(run_rows(adapter, runtime, [encode_image(gradient(20, 20))]), DIMENSION)
    decoded = msgspec.json.decode(msgspec.json.encode(output), type=VisionEmbeddingOutput)
    assert decoded.dimension == DIMENSION
    assert len(decoded.embeddings) == 1
    assert len(decoded.embeddings[0]) == DIMENSION


def _gif() -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (4, 4)).save(buffer, "GIF")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


@pytest.mark.parametrize(
    "payload",
    [
        "%%% not base64",
        base64.b64encode(b"\x89PNG\r\n\x1a\n truncated").decode(),
        base64.b64encode(b"").decode(),
        _gif(),
        encode_image(Image.new("RGB", (4097, 1))),
    ],
    ids=["bad-base64", "broken-png", "empty", "gif", "too-wide"],
)
def test_undecodable_or_unsupported_images_are_invalid_input(
    adapter: VisionEmbeddingAdapter, payload: str
) -> None:
    with pytest.raises(ServingError) as raised:
        adapter.preprocess([payload])
    assert raised.value.code == "INVALID_INPUT"


def test_non_finite_vectors_are_invalid_output(tmp_path: Path) -> None:
    path = tmp_path / "nan.onnx"
    write_tiny_image_encoder(path, scale=float("nan"))
    adapter = VisionEmbeddingAdapter(VisionEmbeddingConfig(dimension=DIMENSION, image_size=SIZE))
    with pytest.raises(ServingError) as raised:
        run_rows(adapter, _runtime(path), [encode_image(gradient(SIZE, SIZE))])
    assert raised.value.code == "INVALID_OUTPUT"


def test_a_dimension_other_than_the_deployments_is_invalid_output(runtime: OnnxRuntimeCpu) -> None:
    adapter = VisionEmbeddingAdapter(VisionEmbeddingConfig(dimension=DIMENSION * 2, image_size=SIZE))
    with pytest.raises(ServingError) as raised:
        run_rows(adapter, runtime, [encode_image(gradient(SIZE, SIZE))])
    assert raised.value.code == "INVALID_OUTPUT"


def test_vectors_a_model_leaves_unnormalised_are_invalid_output(tmp_path: Path) -> None:
    path = tmp_path / "scaled.onnx"
    write_tiny_image_encoder(path, scale=3.0)
    # normalize=False trusts the model to emit unit vectors; this one does not.
    adapter = VisionEmbeddingAdapter(
        VisionEmbeddingConfig(dimension=DIMENSION, image_size=SIZE, normalize=False)
    )
    with pytest.raises(ServingError) as raised:
        run_rows(adapter, _runtime(path), [encode_image(gradient(SIZE, SIZE))])
    assert raised.value.code == "INVALID_OUTPUT"
