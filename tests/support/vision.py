"""A small image encoder the tests build (no image-embedding model ships in a wheel): a real
convolutional ONNX graph that ONNX Runtime runs, and the PNG/JPEG images they embed with it."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from PIL import Image

SIZE, CHANNELS, DIMENSION = 32, 8, 16


def write_tiny_image_encoder(path: Path, *, output: str = "pooled", scale: float = 1.0) -> None:
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


def encode_image(image: Image.Image, image_format: str = "PNG") -> str:
    buffer = io.BytesIO()
    image.save(buffer, image_format)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def gradient(width: int, height: int, flip: bool = False) -> Image.Image:
    x = np.linspace(0, 255, width, dtype=np.float32)[None, :].repeat(height, axis=0)
    y = np.linspace(0, 255, height, dtype=np.float32)[:, None].repeat(width, axis=1)
    channels = [x, y, 255 - x] if not flip else [255 - y, x, y]
    return Image.fromarray(np.stack(channels, axis=2).astype(np.uint8))


def write_tiny_vision_model(folder: Path) -> None:
    """A `vision.embedding@1` artifact folder: the pooled encoder and its serving config."""
    folder.mkdir(parents=True, exist_ok=True)
    write_tiny_image_encoder(folder / "model.onnx")
    config = {"capability": "vision.embedding", "dimension": DIMENSION, "image_size": SIZE}
    (folder / "serving_config.json").write_text(json.dumps(config), encoding="utf-8")
