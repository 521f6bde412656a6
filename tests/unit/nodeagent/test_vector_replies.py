"""A worker writes its vectors as float32 text: the same values, in fewer bytes, in the contract's
output types."""

from __future__ import annotations

from pathlib import Path

import msgspec
import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from nodeagent.adapters.embedding import EmbeddingAdapter
from nodeagent.adapters.vision import VisionEmbeddingAdapter
from nodeagent.runtimes.base import RuntimeOptions
from nodeagent.runtimes.onnx import OnnxRuntimeCpu
from nodeagent.worker.capabilities import EmbeddingServer, VectorsReply, float32_rows
from nodeagent.worker.vision_server import VisionEmbeddingServer
from streams.contracts import (
    EmbeddingInput,
    EmbeddingRunOutput,
    VisionEmbeddingInput,
    VisionEmbeddingOutput,
)
from tests.support.vision import encode_image, gradient, write_tiny_vision_model

_FINITE_FLOAT32 = st.floats(width=32, allow_nan=False, allow_infinity=False)


@given(arrays(np.float32, st.tuples(st.integers(1, 4), st.integers(1, 16)), elements=_FINITE_FLOAT32))
def test_every_float32_reads_back_as_the_same_value(vectors: np.ndarray) -> None:
    reply = VectorsReply(
        float32_rows(vectors), vectors.shape[1], input_tokens=3, item_tokens=[1] * len(vectors)
    )
    read = msgspec.json.decode(msgspec.json.encode(reply), type=EmbeddingRunOutput)
    assert np.array_equal(np.asarray(read.embeddings, dtype=np.float32), vectors)


def test_unit_vectors_take_far_fewer_bytes_than_as_float64_text() -> None:
    vectors = np.random.default_rng(7).standard_normal((32, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    as_float64 = msgspec.json.encode(vectors.tolist())
    assert len(bytes(float32_rows(vectors))) < 0.65 * len(as_float64)


def test_a_reply_without_tokens_is_a_vision_embedding_output() -> None:
    vectors = np.eye(2, 4, dtype=np.float32)
    body = msgspec.json.encode(VectorsReply(float32_rows(vectors), 4))
    assert b"tokens" not in body
    assert msgspec.json.decode(body, type=VisionEmbeddingOutput) == VisionEmbeddingOutput(
        embeddings=[[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]], dimension=4
    )


def _written_as_float32_text(body: bytes, embeddings: list[list[float]]) -> bool:
    """Whether the reply holds its vectors exactly as `float32_rows` writes the values it carries."""
    return bytes(float32_rows(np.asarray(embeddings, dtype=np.float32))) in body


async def test_the_embedding_server_replies_with_float32_text(
    embedding_adapter: EmbeddingAdapter, minilm_runtime: OnnxRuntimeCpu
) -> None:
    server = EmbeddingServer(embedding_adapter, minilm_runtime, 8)
    try:
        request = EmbeddingInput(texts=["How long do llamas live?", "A llama lives twenty years."])
        body, _ = await server.serve(msgspec.json.encode(request))
    finally:
        await server.close()
    read = msgspec.json.decode(body, type=EmbeddingRunOutput)
    assert _written_as_float32_text(body, read.embeddings)


async def test_the_vision_embedding_server_replies_with_float32_text(tmp_path: Path) -> None:
    write_tiny_vision_model(tmp_path)
    runtime = OnnxRuntimeCpu()
    runtime.load(tmp_path / "model.onnx", RuntimeOptions(intra_op_threads=1))
    server = VisionEmbeddingServer(VisionEmbeddingAdapter.from_model_dir(tmp_path), runtime, 4)
    try:
        images = [encode_image(gradient(64, 48)), encode_image(gradient(40, 90, flip=True))]
        body, _ = await server.serve(msgspec.json.encode(VisionEmbeddingInput(images_base64=images)))
    finally:
        await server.close()
        runtime.unload()
    read = msgspec.json.decode(body, type=VisionEmbeddingOutput)
    assert _written_as_float32_text(body, read.embeddings)
