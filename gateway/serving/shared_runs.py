"""What may share one invoke, and how: text embedding requests (`rag.embedding@1`) of one
deployment that agree on how their texts are embedded. Their texts go as one `EmbeddingInput`, in
order; the output is cut back into each request's own output (its vectors, and its texts' tokens
from the worker's `item_tokens`: `streams.contracts.EmbeddingRunOutput`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import msgspec

from streams.codes import ServingError
from streams.contracts import EMBEDDING, EmbeddingInput
from streams.messages import WorkerTimings


class SharedKey(NamedTuple):
    """What requests sharing a run agree on."""

    deployment_id: str
    dimensions: int | None
    normalize: bool
    input_type: str
    priority: int


class Shareable(NamedTuple):
    key: SharedKey
    texts: list[str]


_input = msgspec.json.Decoder(EmbeddingInput)


def shareable(
    capability: str, deployment_id: str, payload: bytes, input_type: str, priority: int
) -> Shareable | None:
    """The request's key and texts, where it may share a run (None: it always goes alone)."""
    if capability != EMBEDDING.capability:
        return None
    texts = _input.decode(payload)  # (the edge encoded it: it decodes)
    return Shareable(
        SharedKey(deployment_id, texts.dimensions, texts.normalize, input_type, priority), texts.texts
    )


def joint_input(key: SharedKey, texts: Sequence[list[str]]) -> bytes:
    """One `EmbeddingInput` holding every member's texts, in the members' order."""
    joined = [text for member in texts for text in member]
    return msgspec.json.encode(
        EmbeddingInput(texts=joined, dimensions=key.dimensions, normalize=key.normalize)
    )


class _Output(msgspec.Struct):
    """The worker's `EmbeddingRunOutput`, its vectors left as JSON (they pass through)."""

    embeddings: list[msgspec.Raw]
    dimension: int
    input_tokens: int
    item_tokens: list[int] | None = None


_output = msgspec.json.Decoder(_Output)
_encoder = msgspec.json.Encoder()


class _Part(msgspec.Struct):
    """One member's part, as a worker's reply of its own (what the member's reader reads)."""

    result: _Output
    timings: WorkerTimings
    ok: bool = True


def split_output(result: bytes, counts: Sequence[int], timings: WorkerTimings) -> list[bytes]:
    """Each member's reply (`counts`: its number of texts; `timings`: the run's): an
    `EmbeddingRunOutput` of its slice of the vectors and the tokens of its own texts.
    INVALID_OUTPUT when the output does not hold one vector and one token count per text."""
    output = _output.decode(result)
    tokens = output.item_tokens
    total = sum(counts)
    if len(output.embeddings) != total or tokens is None or len(tokens) != total:
        raise ServingError("INVALID_OUTPUT", "the worker's output does not hold one vector per text")
    slices: list[bytes] = []
    start = 0
    for count in counts:
        end = start + count
        own = tokens[start:end]
        part = _Output(output.embeddings[start:end], output.dimension, sum(own), own)
        slices.append(_encoder.encode(_Part(part, timings)))
        start = end
    return slices
