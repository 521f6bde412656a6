"""Reading a worker's reply (`gateway.serving.outputs`), and the embedding answer rendered from
the one reading of it."""

from __future__ import annotations

import base64
from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.http.embeddings import _VECTORS, OpenAIEmbeddingRequest, _render
from gateway.serving.outputs import JSON_OUTPUT, OutputReader
from gateway.serving.requests import Served
from streams.codes import ServingError
from streams.contracts import EmbeddingOutput
from streams.events.requests import LatencyBreakdown
from streams.messages import InvokeReply, WorkerTimings

TIMINGS = WorkerTimings(queue_ms=1.5, inference_ms=7.25, batch_size=4)
READERS: list[OutputReader[Any]] = [JSON_OUTPUT, _VECTORS]
float32s = st.floats(width=32, allow_nan=False, allow_infinity=False)


def reply_of(output: object) -> bytes:
    result = msgspec.json.encode(output)
    return msgspec.json.encode(InvokeReply(ok=True, result=msgspec.Raw(result), timings=TIMINGS))


def refusal_of(reader: OutputReader[Any], reply: bytes) -> ServingError:
    with pytest.raises(ServingError) as refused:
        reader.read(reply)
    return refused.value


@settings(max_examples=50)
@given(
    vectors=st.lists(st.lists(float32s, min_size=1, max_size=8), min_size=1, max_size=6),
    tokens=st.integers(0, 10_000),
)
def test_an_embedding_reply_is_read_once_for_its_vectors_tokens_and_timings(
    vectors: list[list[float]], tokens: int
) -> None:
    reply = reply_of(EmbeddingOutput(embeddings=vectors, dimension=len(vectors[0]), input_tokens=tokens))
    output, timings = _VECTORS.read(reply)
    assert [msgspec.json.decode(vector) for vector in output.embeddings] == vectors
    assert _VECTORS.tokens(output) == tokens == JSON_OUTPUT.tokens(JSON_OUTPUT.read(reply)[0])
    assert timings == TIMINGS


@pytest.mark.parametrize(
    "result",
    [
        {"embeddings": "not vectors", "dimension": 1, "input_tokens": 1},
        {"dimension": 1, "input_tokens": 1},  # no vectors at all
        {"embeddings": [[0.5]], "dimension": 1, "input_tokens": "many"},
        None,  # a success with no output
    ],
)
def test_an_embedding_output_its_contract_does_not_describe_is_invalid_output(result: object) -> None:
    assert refusal_of(_VECTORS, reply_of(result)).code == "INVALID_OUTPUT"


@pytest.mark.parametrize("reader", READERS)
def test_a_reply_that_is_not_an_invoke_reply_is_invalid_output(reader: OutputReader[Any]) -> None:
    for reply in (b"not json", b'{"result": {}}', b"[]"):
        assert refusal_of(reader, reply).code == "INVALID_OUTPUT"


@pytest.mark.parametrize("reader", READERS)
def test_a_failure_reply_answers_the_workers_code_and_message(reader: OutputReader[Any]) -> None:
    failed = msgspec.json.encode(InvokeReply(ok=False, code="INVALID_INPUT", message="too long"))
    refused = refusal_of(reader, failed)
    assert (refused.code, refused.message) == ("INVALID_INPUT", "too long")


@pytest.mark.parametrize("reader", READERS)
def test_a_failure_reply_with_a_code_unknown_here_is_inference_failed(reader: OutputReader[Any]) -> None:
    failed = msgspec.json.encode(InvokeReply(ok=False, code="SOMETHING_NEW"))
    assert refusal_of(reader, failed).code == "INFERENCE_FAILED"


def _answer(vectors: list[list[float]], encoding_format: str | None) -> Any:
    output, _ = _VECTORS.read(reply_of(EmbeddingOutput(embeddings=vectors, dimension=3, input_tokens=9)))
    call = msgspec.convert({"input": "x", "encoding_format": encoding_format}, OpenAIEmbeddingRequest)
    served = Served(output, "dep-1", "all-MiniLM-L6-v2", LatencyBreakdown(), cold=False)
    # (encoded and decoded as the client gets it: the float vectors go out as the worker sent them)
    return msgspec.json.decode(msgspec.json.encode(_render(call)(output, served, "req-1")))


def test_base64_and_float_answers_carry_the_same_float32_vectors_and_usage() -> None:
    vectors = [[0.1, -0.25, 3.0e-8], [1.0, 0.0, -1.0]]
    floats, packed = _answer(vectors, "float"), _answer(vectors, "base64")
    assert _answer(vectors, None) == floats  # (float when not given, as OpenAI does)
    assert [item["embedding"] for item in floats["data"]] == vectors
    unpacked = [
        np.frombuffer(base64.b64decode(item["embedding"]), dtype="<f4").tolist() for item in packed["data"]
    ]
    assert unpacked == [np.asarray(v, dtype="<f4").tolist() for v in vectors]
    assert floats["usage"] == packed["usage"] == {"prompt_tokens": 9, "total_tokens": 9}
    assert [item["index"] for item in packed["data"]] == [0, 1]
