"""A worker writes its vectors as float32 text: the same values, in fewer bytes, in the contract's
output types."""

from __future__ import annotations

import msgspec
import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from nodeagent.worker.capabilities import VectorsReply, float32_rows
from streams.contracts import EmbeddingRunOutput, VisionEmbeddingOutput

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
