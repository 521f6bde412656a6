"""A replica holds each acceptance a moment: recorded once when the moment is up, or not at all
when its request ends first (its end event carries it), or at once when a read of the log needs
it."""

from __future__ import annotations

import asyncio
import functools

from gateway.serving.acceptances import HeldAcceptances


async def test_an_acceptance_is_recorded_once_its_hold_is_up() -> None:
    recorded: list[str] = []
    held = HeldAcceptances(0.01)
    held.hold("r1", lambda: recorded.append("r1"))
    assert recorded == []
    await asyncio.sleep(0.05)
    assert recorded == ["r1"]
    assert len(held) == 0


async def test_an_acceptance_taken_before_its_hold_is_up_is_never_recorded() -> None:
    recorded: list[str] = []
    held = HeldAcceptances(0.01)
    held.hold("r1", lambda: recorded.append("r1"))
    assert held.take("r1")
    await asyncio.sleep(0.05)
    assert recorded == []


async def test_an_acceptance_already_recorded_is_not_taken() -> None:
    recorded: list[str] = []
    held = HeldAcceptances(0.01)
    held.hold("r1", lambda: recorded.append("r1"))
    await asyncio.sleep(0.05)
    assert not held.take("r1")
    assert recorded == ["r1"]


async def test_record_all_records_each_held_acceptance_now_and_once() -> None:
    recorded: list[str] = []
    held = HeldAcceptances(0.01)
    for request in ("r1", "r2"):
        held.hold(request, functools.partial(recorded.append, request))
    held.record_all()
    assert recorded == ["r1", "r2"]
    await asyncio.sleep(0.05)
    assert recorded == ["r1", "r2"]
    assert not held.take("r1")


async def test_a_hold_of_zero_records_each_acceptance_at_once() -> None:
    recorded: list[str] = []
    held = HeldAcceptances(0)
    held.hold("r1", lambda: recorded.append("r1"))
    assert recorded == ["r1"]
    assert not held.take("r1")


async def test_each_acceptance_is_held_at_least_half_a_hold_and_recorded_once_in_the_order_held() -> None:
    loop = asyncio.get_running_loop()
    held_at: dict[str, float] = {}
    recorded: list[tuple[str, float]] = []
    held = HeldAcceptances(0.04)

    def note(request: str) -> None:
        recorded.append((request, loop.time()))

    for request in ("r1", "r2", "r3"):
        held_at[request] = loop.time()
        held.hold(request, functools.partial(note, request))
        await asyncio.sleep(0.015)
    await asyncio.sleep(0.1)
    assert [request for request, _ in recorded] == ["r1", "r2", "r3"]
    for request, at in recorded:
        assert at - held_at[request] >= 0.02 - 1e-6  # (a timer may fire a clock tick early)
