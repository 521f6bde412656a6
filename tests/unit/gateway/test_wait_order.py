"""The line of requests waiting for capacity: woken higher client priority first, then in arrival
order, only the first of each deployment; a newcomer goes behind anyone of at least its priority
waiting for the same deployment."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.serving.context import ServingContext
from gateway.serving.line import Place, next_up, waits_behind, yields

sys.path.insert(0, str(Path(__file__).parents[1] / "scheduler"))


def wake_order(line: list[Place]) -> list[Place]:
    """The order the line's rule states: higher priority first, arrival order among equals."""
    return sorted(line, key=lambda p: -p.priority)


async def test_waiting_requests_are_woken_higher_priority_first_then_in_arrival_order() -> None:
    ctx = ServingContext(store=None, live=None, client=None, gateway_id="g")  # type: ignore[arg-type]
    places = [Place(model, priority) for model, priority in (("a", 0), ("b", 5), ("c", 0), ("d", 9))]
    ctx.waiting.extend(places)
    woken: list[int] = []

    async def wait_in_line(index: int) -> None:
        await places[index].woken.wait()
        woken.append(index)

    waiters = [asyncio.create_task(wait_in_line(i)) for i in range(len(places))]
    await asyncio.sleep(0)  # let every waiter reach its wait
    ctx.wake_waiting()
    await asyncio.gather(*waiters)
    assert woken == [3, 1, 0, 2]


def test_a_change_wakes_the_first_waiter_of_each_deployment_not_being_admitted() -> None:
    ctx = ServingContext(store=None, live=None, client=None, gateway_id="g")  # type: ignore[arg-type]
    admitted, first, second, other = Place("emb", admitted=True), Place("emb"), Place("emb"), Place("rerank")
    ctx.waiting.extend([admitted, first, second, other])
    ctx.wake_waiting()
    assert [p.woken.is_set() for p in ctx.waiting] == [False, True, False, True]
    first.admitted = True
    ctx.wake_waiting("emb")  # once the first is admitted, the next of its deployment
    assert second.woken.is_set()


@given(
    st.lists(
        st.tuples(st.sampled_from(["emb", "rerank", "ocr"]), st.integers(0, 2), st.booleans()), max_size=12
    )
)
def test_the_waiters_woken_are_exactly_those_that_wait_behind_no_one_in_wake_order(
    waiters: list[tuple[str, int, bool]],
) -> None:
    line = [Place(model, priority, admitted=admitted) for model, priority, admitted in waiters]
    free = [place for place in line if not place.admitted and not waits_behind(line, place)]
    assert next_up(line) == wake_order(free)


def test_a_newcomer_goes_behind_a_request_of_its_priority_waiting_for_the_same_deployment() -> None:
    line = [Place("emb", 0)]
    assert waits_behind(line, Place("emb", 0))
    assert not waits_behind(line, Place("emb", 1))  # a higher priority goes first
    assert not waits_behind(line, Place("rerank", 0))  # another deployment does not wait for it


# One deployment's line on a replica, simulated as the gateway runs it. A freed lease wakes the
# line, but the woken requests decide only when they next run ("decide"); a newcomer may arrive in
# between. A newcomer takes a free lease at once unless it must wait behind someone in line; the
# woken line takes free leases in wake order.
steps = st.lists(
    st.one_of(st.tuples(st.just("arrive"), st.integers(0, 2)), st.just(("free", 0)), st.just(("decide", 0))),
    max_size=80,
)


@given(steps, st.integers(0, 3))
def test_within_a_priority_requests_are_served_in_arrival_order(
    plan: list[tuple[str, int]], free: int
) -> None:
    line: list[Place] = []
    served: list[tuple[int, int]] = []  # (priority, arrival number)
    arrival_of: dict[int, int] = {}
    for number, (kind, priority) in enumerate([*plan, ("decide", 0)]):
        if kind == "arrive":
            place = Place("emb", priority)
            arrival_of[id(place)] = number
            if free and not waits_behind(line, place):
                free -= 1
                served.append((priority, number))
            else:
                line.append(place)
        elif kind == "free":
            free += 1
        else:
            while free and line:
                first = wake_order(line)[0]
                line.remove(first)
                free -= 1
                served.append((first.priority, arrival_of[id(first)]))
    for priority in range(3):
        order = [number for p, number in served if p == priority]
        assert order == sorted(order)


def test_a_waiter_blocked_past_the_window_makes_later_requests_for_another_model_leave_its_accelerator() -> (
    None
):
    starving = Place("b", blocked_on="gpu-0", since=100.0)
    newcomer = Place("a")
    assert yields([starving], newcomer, "gpu-0", now=102.0, window_s=2.0)
    assert not yields([starving], newcomer, "gpu-0", now=101.9, window_s=2.0)  # not its turn yet
    assert not yields([starving], newcomer, "gpu-1", now=102.0, window_s=2.0)  # another accelerator
    assert not yields([starving], Place("b"), "gpu-0", now=102.0, window_s=2.0)  # its own model


def test_only_waiters_ahead_in_line_of_at_least_its_priority_take_the_turn() -> None:
    queued = Place("a")
    starving = Place("b", blocked_on="gpu-0", since=100.0)
    assert not yields([queued, starving], queued, "gpu-0", now=200.0, window_s=2.0)  # it was first
    assert yields([starving, queued], queued, "gpu-0", now=200.0, window_s=2.0)
    urgent = Place("a", priority=5)
    assert not yields([starving], urgent, "gpu-0", now=200.0, window_s=2.0)


def test_a_request_in_line_goes_behind_one_of_its_priority_ahead_of_it_unless_that_one_is_admitted() -> None:
    first, second = Place("emb", 0), Place("emb", 0)
    line = [first, second]
    assert waits_behind(line, second)
    assert not waits_behind(line, first)
    first.admitted = True
    assert not waits_behind(line, second)


# Any order of decisions among waiting requests: hypothesis picks which one decides next (woken
# in any order, deciding again at once after a conflict, resuming late after a wake-up), and when
# leases free up, for two deployments. A request takes a free lease of its deployment unless it
# must wait behind someone in line.
anyone_deciding = st.lists(
    st.one_of(
        st.tuples(st.just("arrive"), st.sampled_from(["emb", "rerank"]), st.integers(0, 1)),
        st.tuples(st.just("free"), st.sampled_from(["emb", "rerank"]), st.just(0)),
        st.tuples(st.just("decide"), st.just(""), st.integers(0, 7)),  # which waiter decides
    ),
    max_size=120,
)


@settings(max_examples=400)  # (cheap; an out-of-turn decision takes a few steps to set up)
@given(anyone_deciding)
def test_no_request_is_admitted_before_one_queued_ahead_of_it_for_its_deployment_and_priority(
    plan: list[tuple[str, str, int]],
) -> None:
    line: list[Place] = []
    free = {"emb": 0, "rerank": 0}
    arrival: dict[int, int] = {}
    admitted: list[tuple[str, int, int]] = []  # (deployment, priority, arrival number)

    def decide(place: Place) -> bool:
        if not free[place.deployment_id] or waits_behind(line, place):
            return False
        free[place.deployment_id] -= 1
        admitted.append((place.deployment_id, place.priority, arrival[id(place)]))
        return True

    for number, (kind, deployment, value) in enumerate(plan):
        if kind == "arrive":
            place = Place(deployment, value)
            arrival[id(place)] = number
            if not decide(place):
                line.append(place)
        elif kind == "free":
            free[deployment] += 1
        elif line:
            place = line[value % len(line)]
            if decide(place):
                line.remove(place)
    for deployment in free:
        for priority in range(2):
            order = [n for d, p, n in admitted if (d, p) == (deployment, priority)]
            assert order == sorted(order)
