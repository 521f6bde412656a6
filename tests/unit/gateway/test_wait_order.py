"""Requests waiting for capacity are woken higher client priority first, then in arrival order."""

from __future__ import annotations

import asyncio

from gateway.serving.context import ServingContext


async def test_waiting_requests_are_woken_higher_priority_first_then_in_arrival_order() -> None:
    ctx = ServingContext(store=None, live=None, client=None, gateway_id="g")  # type: ignore[arg-type]
    priorities = [0, 5, 0, 9]  # in arrival order
    places = [asyncio.Event() for _ in priorities]
    for place, priority in zip(places, priorities, strict=True):
        ctx.waiting.append(place)
        if priority:
            ctx.priority_of[place] = priority
    woken: list[int] = []

    async def wait_in_line(index: int) -> None:
        await places[index].wait()
        woken.append(index)

    waiters = [asyncio.create_task(wait_in_line(i)) for i in range(len(places))]
    await asyncio.sleep(0)  # let every waiter reach its wait
    ctx.wake_waiting()
    await asyncio.gather(*waiters)
    assert woken == [3, 1, 0, 2]
