"""Decoding a request body as JSON: a body nested past what the decoder allows is refused
(tests/integration/gateway/test_client_api_edges.py), and nothing else in the process pays for it."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from gateway.http.body import decode_json
from streams.codes import ServingError

TOO_DEEP = b'{"input": ' + b"[" * 5000 + b"]" * 5000 + b"}"


def _needs_stack(frames: int) -> int:
    return 0 if frames == 0 else 1 + _needs_stack(frames - 1)


class _Finalized:
    """Cyclic garbage (only the cyclic collector frees it) whose finalizer needs some stack."""

    def __init__(self, outcomes: list[str]) -> None:
        self.outcomes = outcomes
        self.cycle = self

    def __del__(self) -> None:
        try:
            _needs_stack(100)
            self.outcomes.append("ran")
        except RecursionError:
            self.outcomes.append("failed")


@pytest.fixture
def gc_thresholds() -> Iterator[None]:
    saved = gc.get_threshold()
    yield
    gc.set_threshold(*saved)


def test_a_collection_due_during_a_deep_decode_does_not_run_finalizers_at_that_depth(
    gc_thresholds: None,
) -> None:
    outcomes: list[str] = []
    # A collection comes due after `threshold` allocations: at some depth of the decode's descent.
    for threshold in range(500, 1000, 25):
        gc.collect()
        _Finalized(outcomes)
        gc.set_threshold(threshold)
        with pytest.raises(ServingError):
            decode_json(TOO_DEEP)
        gc.collect()

    assert outcomes == ["ran"] * len(range(500, 1000, 25))
