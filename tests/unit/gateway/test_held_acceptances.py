"""A replica holds each acceptance a moment: recorded once when the moment is up, or not at all
when its request ends first (its end event carries it), or at once when a read of the log needs
it. Each test waits for a recording, never for a length of time: the one timer records in the
order held, so a later acceptance recorded says an earlier one had its turn."""

from __future__ import annotations

import asyncio
import functools

from gateway.serving.acceptances import HeldAcceptances


class Recorded:
    """What was recorded, in order, with when (the loop's clock)."""

    def __init__(self) -> None:
        self.order: list[str] = []
        self.at: dict[str, float] = {}
        self._events: dict[str, asyncio.Event] = {}

    def hold(self, held: HeldAcceptances, request: str) -> None:
        held.hold(request, functools.partial(self._note, request))

    def _note(self, request: str) -> None:
        self.order.append(request)
        self.at[request] = asyncio.get_running_loop().time()
        self._event(request).set()

    async def until(self, request: str) -> None:
        async with asyncio.timeout(5):
            await self._event(request).wait()

    def _event(self, request: str) -> asyncio.Event:
        return self._events.setdefault(request, asyncio.Event())


async def test_an_acceptance_is_recorded_once_its_hold_is_up() -> None:
    recorded, held = Recorded(), HeldAcceptances(0.01)
    recorded.hold(held, "r1")
    assert recorded.order == []
    await recorded.until("r1")
    assert recorded.order == ["r1"]
    assert len(held) == 0


async def test_an_acceptance_taken_before_its_hold_is_up_is_never_recorded() -> None:
    recorded, held = Recorded(), HeldAcceptances(0.01)
    recorded.hold(held, "r1")
    assert held.take("r1")
    recorded.hold(held, "r2")
    await recorded.until("r2")
    assert recorded.order == ["r2"]


async def test_an_acceptance_already_recorded_is_not_taken() -> None:
    recorded, held = Recorded(), HeldAcceptances(0.01)
    recorded.hold(held, "r1")
    await recorded.until("r1")
    assert not held.take("r1")
    assert recorded.order == ["r1"]


async def test_record_all_records_each_held_acceptance_now_and_once() -> None:
    recorded, held = Recorded(), HeldAcceptances(0.01)
    for request in ("r1", "r2"):
        recorded.hold(held, request)
    held.record_all()
    assert recorded.order == ["r1", "r2"]
    assert not held.take("r1")
    recorded.hold(held, "r3")
    await recorded.until("r3")  # (the timer armed for r1 has fired by now)
    assert recorded.order == ["r1", "r2", "r3"]


async def test_a_hold_of_zero_records_each_acceptance_at_once() -> None:
    recorded, held = Recorded(), HeldAcceptances(0)
    recorded.hold(held, "r1")
    assert recorded.order == ["r1"]
    assert not held.take("r1")


async def test_each_acceptance_is_held_at_least_half_a_hold_and_recorded_once_in_the_order_held() -> None:
    loop = asyncio.get_running_loop()
    recorded, held = Recorded(), HeldAcceptances(0.04)
    held_at: dict[str, float] = {}
    for request in ("r1", "r2", "r3"):
        held_at[request] = loop.time()
        recorded.hold(held, request)
        await asyncio.sleep(0.015)  # (spreads the three over the hold; nothing is timed by it)
    await recorded.until("r3")
    assert recorded.order == ["r1", "r2", "r3"]
    for request, at in recorded.at.items():
        assert at - held_at[request] >= 0.02 - 1e-6  # (a timer may fire a clock tick early)
