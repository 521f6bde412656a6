"""Embedding requests sharing a run: their texts go as one input in their order, and the output is
cut back into each request's own vectors (indexed from 0) and tokens."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.serving.outputs import Reply
from gateway.serving.shared_runs import Shareable, SharedKey, joint_input, shareable, split_output
from streams.codes import ServingError
from streams.contracts import EMBEDDING, EmbeddingInput, EmbeddingRunOutput
from streams.messages import WorkerTimings

KEY = SharedKey("dep", 16, True, "query", 0)
TIMINGS = WorkerTimings(inference_ms=3.0)


def worker_output(count: int) -> bytes:
    """What the worker answers for `count` texts: text i's vector is [i, -i], its tokens i + 1."""
    return msgspec.json.encode(
        EmbeddingRunOutput(
            embeddings=[[float(i), float(-i)] for i in range(count)],
            dimension=2,
            input_tokens=sum(range(1, count + 1)),
            item_tokens=list(range(1, count + 1)),
        )
    )


@given(st.lists(st.integers(1, 5), min_size=1, max_size=8))
def test_each_member_gets_a_reply_of_its_own_slice_of_the_vectors_and_its_own_tokens(
    counts: list[int],
) -> None:
    replies = split_output(worker_output(sum(counts)), counts, TIMINGS)
    parts = [msgspec.json.decode(reply, type=Reply[EmbeddingRunOutput]) for reply in replies]
    assert all(part.ok and part.timings == TIMINGS for part in parts)
    start = 0
    for count, part in zip(counts, (p.result for p in parts), strict=True):
        own = range(start, start + count)
        assert part.embeddings == [[float(i), float(-i)] for i in own]
        assert part.item_tokens == [i + 1 for i in own]
        assert part.input_tokens == sum(i + 1 for i in own)
        assert part.dimension == 2
        start += count


def test_members_texts_go_as_one_input_in_the_members_order() -> None:
    joint = msgspec.json.decode(joint_input(KEY, [["a", "b"], ["c"]]), type=EmbeddingInput)
    assert joint == EmbeddingInput(texts=["a", "b", "c"], dimensions=16, normalize=True)


@pytest.mark.parametrize("item_tokens", [None, [1, 2]])
def test_an_output_without_one_vector_and_one_token_count_per_text_is_invalid(
    item_tokens: list[int] | None,
) -> None:
    output = msgspec.json.encode(
        EmbeddingRunOutput(
            embeddings=[[0.0], [1.0], [2.0]], dimension=1, input_tokens=3, item_tokens=item_tokens
        )
    )
    with pytest.raises(ServingError) as refused:
        split_output(output, [1, 2], TIMINGS)
    assert refused.value.code == "INVALID_OUTPUT"


def test_requests_share_a_run_only_with_the_same_deployment_dimensions_normalisation_input_type_and_priority() -> (
    None
):
    payload = msgspec.json.encode(EmbeddingInput(texts=["x"], dimensions=16))
    assert shareable(EMBEDDING.capability, "dep", payload, "query", 0) == Shareable(KEY, ["x"])


def test_other_capabilities_never_share_a_run() -> None:
    assert shareable("rag.rerank@1", "dep", b'{"query":"q","documents":[]}', "", 0) is None
