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


CLIP_SIZE, CLIP_PATCH, CLIP_WIDTH, CLIP_DIMENSION = 224, 32, 64, 512


def write_clip_shaped_model(folder: Path) -> Path:
    """A `vision.embedding@1` folder shaped as a CLIP image tower exported to ONNX (Hugging Face's
    CLIPVisionModelWithProjection): `pixel_values` [batch, 3, 224, 224] in, patch embedding by a
    32x32/32 convolution, 49 patch tokens, `last_hidden_state` [batch, 49, 64] and the projected
    `image_embeds` [batch, 512] out. The weights are random; the shapes, names and the choice of
    output a serving config must make are a real export's."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(11)
    patches = rng.normal(0, 0.05, (CLIP_WIDTH, 3, CLIP_PATCH, CLIP_PATCH)).astype(np.float32)
    projection = rng.normal(0, 0.2, (CLIP_WIDTH, CLIP_DIMENSION)).astype(np.float32)
    tokens = (CLIP_SIZE // CLIP_PATCH) ** 2
    nodes = [
        helper.make_node(
            "Conv",
            ["pixel_values", "patch_embedding"],
            ["patch_grid"],
            kernel_shape=[32, 32],
            strides=[32, 32],
        ),
        helper.make_node("Reshape", ["patch_grid", "token_shape"], ["width_tokens"]),
        helper.make_node("Transpose", ["width_tokens"], ["tokens"], perm=[0, 2, 1]),
        helper.make_node(
            "LayerNormalization", ["tokens", "ln_scale", "ln_bias"], ["last_hidden_state"], axis=-1
        ),
        helper.make_node("ReduceMean", ["last_hidden_state", "token_axis"], ["pooled"], keepdims=0),
        helper.make_node("MatMul", ["pooled", "visual_projection"], ["image_embeds"]),
    ]
    initializers = [
        numpy_helper.from_array(patches, "patch_embedding"),
        numpy_helper.from_array(np.array([0, CLIP_WIDTH, -1], dtype=np.int64), "token_shape"),
        numpy_helper.from_array(np.ones(CLIP_WIDTH, dtype=np.float32), "ln_scale"),
        numpy_helper.from_array(np.zeros(CLIP_WIDTH, dtype=np.float32), "ln_bias"),
        numpy_helper.from_array(np.array([1], dtype=np.int64), "token_axis"),
        numpy_helper.from_array(projection, "visual_projection"),
    ]
    graph = helper.make_graph(
        nodes,
        "clip_shaped_image_tower",
        [
            helper.make_tensor_value_info(
                "pixel_values", TensorProto.FLOAT, ["batch", 3, CLIP_SIZE, CLIP_SIZE]
            )
        ],
        [
            helper.make_tensor_value_info(
                "last_hidden_state", TensorProto.FLOAT, ["batch", tokens, CLIP_WIDTH]
            ),
            helper.make_tensor_value_info("image_embeds", TensorProto.FLOAT, ["batch", CLIP_DIMENSION]),
        ],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(folder / "model.onnx"))
    config = {
        "capability": "vision.embedding",
        "dimension": CLIP_DIMENSION,
        "image_size": CLIP_SIZE,
        "input_name": "pixel_values",
        "output_name": "image_embeds",
    }
    (folder / "serving_config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder
