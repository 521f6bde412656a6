"""The accelerator writer sends decisions one by one while few are staged, and everything staged
as one atomic batch once many are; a decision's own events always travel together."""

from __future__ import annotations

import asyncio

from gateway.serving.appends import CHAIN_MAX_EVENTS, MAX_BATCH_EVENTS, _next_batch, _Staged
from streams.events import serving as s


def decision(events: int = 1) -> _Staged:
    released = [
        s.LeaseReleased(lease_id=f"l{i}", accelerator_id="a1", outcome="completed") for i in range(events)
    ]
    return _Staged(list(released), None, asyncio.get_running_loop().create_future())


async def test_while_few_events_are_staged_the_oldest_decision_goes_alone() -> None:
    queue = [decision() for _ in range(CHAIN_MAX_EVENTS)]
    first = queue[0]
    assert _next_batch(queue) == [first]
    assert len(queue) == CHAIN_MAX_EVENTS - 1


async def test_a_decision_of_several_events_goes_whole_even_alone() -> None:
    queue = [decision(events=2)]
    assert [len(item.events) for item in _next_batch(queue)] == [2]


async def test_once_many_are_staged_they_go_together_up_to_the_batch_limit() -> None:
    queue = [decision() for _ in range(MAX_BATCH_EVENTS + 10)]
    assert len(_next_batch(queue)) == MAX_BATCH_EVENTS
    assert len(queue) == 10
