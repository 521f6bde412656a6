"""vision.embedding over generated ONNX image encoders (no small real one ships in a wheel).

The generated encoders are real convolutional graphs run by ONNX Runtime: a strided convolution,
ReLU, then either global average pooling and a projection (pooled output) or a reshape into
patch tokens (token-state output the adapter pools).
"""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import msgspec
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
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

SIZE, CHANNELS, DIMENSION = 32, 8, 16


def _write_encoder(path: Path, *, output: str = "pooled", scale: float = 1.0) -> None:
    """`pooled`: [batch, 16] embeddings; `tokens`: [batch, 64 patches, 8] states. `scale` multiplies the output."""
    rng = np.random.default_rng(3)
    conv = rng.normal(0, 0.5, (CHANNELS, 3, 4, 4)).astype(np.float32)
    projection = rng.normal(0, 1.0, (CHANNELS, DIMENSION)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["pixel_values", "conv"], ["conv_out"], kernel_shape=[4, 4], strides=[4, 4]),
        helper.make_node("Relu", ["conv_out"], ["features"]),  # [batch, 8, 8, 8]
    ]
    initializers = [
        numpy_helper.from_array(conv, "conv"),
        numpy_helper.from_array(np.array([scale], dtype=np.float32), "scale"),
    ]
    if output == "pooled":
        nodes += [
            helper.make_node("GlobalAveragePool", ["features"], ["pooled"]),
            helper.make_node("Flatten", ["pooled"], ["flat"]),
            helper.make_node("MatMul", ["flat", "projection"], ["embedding"]),
        ]
        initializers.append(numpy_helper.from_array(projection, "projection"))
        shape: list[int | str] = ["batch", DIMENSION]
    else:
        nodes += [
            helper.make_node("Reshape", ["features", "token_shape"], ["channels_tokens"]),
            helper.make_node("Transpose", ["channels_tokens"], ["embedding"], perm=[0, 2, 1]),
        ]
        initializers.append(
            numpy_helper.from_array(np.array([0, CHANNELS, -1], dtype=np.int64), "token_shape")
        )
        shape = ["batch", 64, CHANNELS]
    nodes.append(helper.make_node("Mul", ["embedding", "scale"], ["image_embeds"]))
    graph = helper.make_graph(
        nodes,
        "tiny_image_encoder",
        [helper.make_tensor_value_info("pixel_values", TensorProto.FLOAT, ["batch", 3, SIZE, SIZE])],
        [helper.make_tensor_value_info("image_embeds", TensorProto.FLOAT, shape)],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def _runtime(path: Path) -> OnnxRuntimeCpu:
    runtime = OnnxRuntimeCpu()
    runtime.load(path, RuntimeOptions(intra_op_threads=1))
    return runtime


def _encode(image: Image.Image, image_format: str = "PNG") -> str:
    buffer = io.BytesIO()
    image.save(buffer, image_format)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _gradient(width: int, height: int, flip: bool = False) -> Image.Image:
    x = np.linspace(0, 255, width, dtype=np.float32)[None, :].repeat(height, axis=0)
    y = np.linspace(0, 255, height, dtype=np.float32)[:, None].repeat(width, axis=1)
    channels = [x, y, 255 - x] if not flip else [255 - y, x, y]
    return Image.fromarray(np.stack(channels, axis=2).astype(np.uint8))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("vision")
    _write_encoder(root / "model.onnx")
    config = {"capability": "vision.embedding", "dimension": DIMENSION, "image_size": SIZE}
    (root / "serving_config.json").write_text(json.dumps(config), encoding="utf-8")
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
    results = run_rows(adapter, runtime, [_encode(_gradient(64, 48)), _encode(_gradient(40, 90, flip=True))])
    assert [r.vector.shape for r in results] == [(DIMENSION,), (DIMENSION,)]
    assert [round(float(np.linalg.norm(r.vector)), 5) for r in results] == [1.0, 1.0]


def test_adapter_equals_direct_onnxruntime_with_clip_normalisation(
    adapter: VisionEmbeddingAdapter, runtime: OnnxRuntimeCpu, model_dir: Path
) -> None:
    image = _gradient(SIZE, SIZE)  # already the model's size: no resize, no crop
    pixels = (np.asarray(image, dtype=np.float32) / 255.0 - np.asarray(CLIP_MEAN)) / np.asarray(CLIP_STD)
    session = ort.InferenceSession(str(model_dir / "model.onnx"), providers=["CPUExecutionProvider"])
    (raw,) = session.run(None, {"pixel_values": pixels.transpose(2, 0, 1)[None].astype(np.float32)})
    expected = raw[0] / np.linalg.norm(raw[0])
    (result,) = run_rows(adapter, runtime, [_encode(image)])
    np.testing.assert_allclose(result.vector, expected, atol=1e-5)


def test_the_shortest_side_is_resized_and_the_centre_cropped(adapter: VisionEmbeddingAdapter) -> None:
    wide = np.zeros((50, 150, 3), dtype=np.uint8)
    wide[:, 50:100] = 255  # the white centre third survives the crop, the black sides do not
    batch = adapter.preprocess([_encode(Image.fromarray(wide))])
    white = to_chw_float(np.full((1, 1, 3), 255, dtype=np.uint8), CLIP_MEAN, CLIP_STD)[:, 0, 0]
    pixels = batch.feeds["pixel_values"]
    assert pixels.shape == (1, 3, SIZE, SIZE)
    np.testing.assert_allclose(pixels[0, :, SIZE // 2, SIZE // 2], white, atol=1e-5)
    np.testing.assert_allclose(pixels[0, :, SIZE // 2, 2], white, atol=0.2)


def test_png_and_jpeg_of_one_picture_embed_alike(
    adapter: VisionEmbeddingAdapter, runtime: OnnxRuntimeCpu
) -> None:
    image = _gradient(96, 96)
    png, jpeg = run_rows(adapter, runtime, [_encode(image), _encode(image, "JPEG")])
    different = run_rows(adapter, runtime, [_encode(_gradient(96, 96, flip=True))])[0]
    assert float(png.vector @ jpeg.vector) > 0.999
    assert float(png.vector @ different.vector) < float(png.vector @ jpeg.vector)


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_token_states_are_pooled_then_normalised(tmp_path: Path, pooling: str) -> None:
    path = tmp_path / "tokens.onnx"
    _write_encoder(path, output="tokens")
    config = VisionEmbeddingConfig(dimension=CHANNELS, image_size=SIZE, pooling=pooling)
    adapter = VisionEmbeddingAdapter(config)
    batch = adapter.preprocess([_encode(_gradient(SIZE, SIZE))])
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (tokens,) = session.run(None, dict(batch.feeds))
    pooled = tokens[0, 0] if pooling == "cls" else tokens[0].mean(axis=0)
    (result,) = run_rows(adapter, _runtime(path), [_encode(_gradient(SIZE, SIZE))])
    np.testing.assert_allclose(result.vector, pooled / np.linalg.norm(pooled), atol=1e-5)


def test_output_round_trips_through_the_contract_json(
    adapter: VisionEmbeddingAdapter, runtime: OnnxRuntimeCpu
) -> None:
    output = vision_output(run_rows(adapter, runtime, [_encode(_gradient(20, 20))]), DIMENSION)
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
        _encode(Image.new("RGB", (4097, 1))),
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
    _write_encoder(path, scale=float("nan"))
    adapter = VisionEmbeddingAdapter(VisionEmbeddingConfig(dimension=DIMENSION, image_size=SIZE))
    with pytest.raises(ServingError) as raised:
        run_rows(adapter, _runtime(path), [_encode(_gradient(SIZE, SIZE))])
    assert raised.value.code == "INVALID_OUTPUT"


def test_a_dimension_other_than_the_deployments_is_invalid_output(runtime: OnnxRuntimeCpu) -> None:
    adapter = VisionEmbeddingAdapter(VisionEmbeddingConfig(dimension=DIMENSION * 2, image_size=SIZE))
    with pytest.raises(ServingError) as raised:
        run_rows(adapter, runtime, [_encode(_gradient(SIZE, SIZE))])
    assert raised.value.code == "INVALID_OUTPUT"


def test_vectors_a_model_leaves_unnormalised_are_invalid_output(tmp_path: Path) -> None:
    path = tmp_path / "scaled.onnx"
    _write_encoder(path, scale=3.0)
    # normalize=False trusts the model to emit unit vectors; this one does not.
    adapter = VisionEmbeddingAdapter(
        VisionEmbeddingConfig(dimension=DIMENSION, image_size=SIZE, normalize=False)
    )
    with pytest.raises(ServingError) as raised:
        run_rows(adapter, _runtime(path), [_encode(_gradient(SIZE, SIZE))])
    assert raised.value.code == "INVALID_OUTPUT"
