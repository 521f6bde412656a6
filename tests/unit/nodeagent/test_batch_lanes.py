"""Lanes: with more than one batch's worth queued, batches run at once, each through `run_lane`."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

from hypothesis import given
from hypothesis import strategies as st

from nodeagent.worker.batching import LANE_SLACK, DynamicBatcher, plan_batch, plan_lanes

shapes = st.lists(st.tuples(st.integers(1, 40), st.integers(1, 30)), max_size=30)
budgets = st.none() | st.integers(1, 600)


@given(shapes, st.integers(1, 32), budgets, st.integers(1, 4))
def test_lanes_take_leading_parts_each_batch_at_least_one(
    parts: list[tuple[int, int]], max_rows: int, tokens: int | None, lanes: int
) -> None:
    counts = plan_lanes(parts, max_rows, tokens, lanes)
    assert len(counts) <= lanes
    assert all(count >= 1 for count in counts)
    assert sum(counts) <= len(parts)
    assert bool(counts) == bool(parts)


@given(shapes, st.integers(1, 32), budgets, st.integers(1, 4))
def test_every_lane_batch_keeps_the_batch_limits(
    parts: list[tuple[int, int]], max_rows: int, tokens: int | None, lanes: int
) -> None:
    start = 0
    for count in plan_lanes(parts, max_rows, tokens, lanes):
        batch = parts[start : start + count]
        start += count
        if count > 1:  # a single part always runs, even over the limits
            assert sum(rows for rows, _ in batch) <= max_rows
            if tokens is not None:
                assert sum(rows for rows, _ in batch) * max(longest for _, longest in batch) <= tokens


@given(shapes, st.integers(1, 32), budgets)
def test_one_lane_is_one_ordinary_batch(
    parts: list[tuple[int, int]], max_rows: int, tokens: int | None
) -> None:
    expected = [plan_batch(parts, max_rows, tokens)[0]] if parts else []
    assert plan_lanes(parts, max_rows, tokens, 1) == expected


@given(shapes, st.integers(1, 32), budgets, st.integers(2, 4))
def test_work_for_one_batch_runs_as_one_batch(
    parts: list[tuple[int, int]], max_rows: int, tokens: int | None, lanes: int
) -> None:
    taken, _ = plan_batch(parts, max_rows, tokens)
    if taken == len(parts):
        assert plan_lanes(parts, max_rows, tokens, lanes) == ([taken] if parts else [])


@given(shapes, st.integers(1, 32), budgets, st.integers(2, 4))
def test_lanes_that_run_at_once_hold_about_even_rows(
    parts: list[tuple[int, int]], max_rows: int, tokens: int | None, lanes: int
) -> None:
    counts = plan_lanes(parts, max_rows, tokens, lanes)
    if len(counts) > 1:
        ends = [sum(counts[: i + 1]) for i in range(len(counts))]
        rows = [sum(r for r, _ in parts[end - count : end]) for end, count in zip(ends, counts, strict=True)]
        assert max(rows) * len(rows) <= LANE_SLACK * sum(rows)


def test_a_lone_row_beside_a_full_batch_runs_first_on_every_thread() -> None:
    # Two lanes would run the full batch on one thread while the other idles after its one row.
    assert plan_lanes([(1, 10), (32, 10)], max_rows=32, max_padded_tokens=None, lanes=2) == [1]
    assert plan_lanes([(32, 10), (1, 10)], max_rows=32, max_padded_tokens=None, lanes=2) == [1]


def test_rows_are_evened_out_over_the_lanes() -> None:
    assert plan_lanes([(1, 10)] * 33, max_rows=32, max_padded_tokens=None, lanes=2) == [17, 16]
    assert plan_lanes([(32, 10)] * 5, max_rows=32, max_padded_tokens=None, lanes=2) == [1, 1]


class BarrierRun:
    """A batch function that every call must meet `parties` calls at: it only returns when that
    many calls are inside at once (the barrier breaks, and the call fails, otherwise)."""

    def __init__(self, parties: int) -> None:
        self.barrier = threading.Barrier(parties, timeout=30)
        self.calls: list[list[str]] = []

    def __call__(self, rows: Sequence[str]) -> list[str]:
        self.calls.append(list(rows))
        self.barrier.wait()
        return [row.upper() for row in rows]


def refuse(rows: Sequence[str]) -> list[str]:
    raise AssertionError("a batch that had company ran through run_batch")


async def test_two_queued_batches_run_at_once_in_two_lanes() -> None:
    lane = BarrierRun(2)
    batcher: DynamicBatcher[str, str] = DynamicBatcher(
        refuse, max_batch_size=2, max_wait_s=0.0, inline=True, lanes=2, run_lane=lane
    )
    async with asyncio.timeout(60):
        results = await asyncio.gather(*(batcher.submit([f"x{i}"]) for i in range(4)))
    assert results == [["X0"], ["X1"], ["X2"], ["X3"]]
    assert sorted(map(sorted, lane.calls)) == [["x0", "x1"], ["x2", "x3"]]
    await batcher.close()


async def test_a_lone_batch_runs_through_run_batch_on_all_threads() -> None:
    wide: list[list[str]] = []

    def run(rows: Sequence[str]) -> list[str]:
        wide.append(list(rows))
        return [row.upper() for row in rows]

    batcher: DynamicBatcher[str, str] = DynamicBatcher(
        run, max_batch_size=8, max_wait_s=0.0, lanes=2, run_lane=refuse
    )
    assert await batcher.submit(["a", "b", "c"]) == ["A", "B", "C"]
    assert wide == [["a", "b", "c"]]
    await batcher.close()


async def test_a_failing_row_in_one_lane_fails_only_its_caller() -> None:
    def run_lane(rows: Sequence[str]) -> list[str]:
        if "bad" in rows:
            raise ValueError("cannot process bad")
        return [row.upper() for row in rows]

    batcher: DynamicBatcher[str, str] = DynamicBatcher(
        refuse, max_batch_size=2, max_wait_s=0.0, lanes=2, run_lane=run_lane
    )
    outcomes = await asyncio.gather(
        *(batcher.submit([row]) for row in ("a", "bad", "c", "d")), return_exceptions=True
    )
    assert outcomes[0] == ["A"]
    assert isinstance(outcomes[1], ValueError)
    assert outcomes[2:] == [["C"], ["D"]]
    await batcher.close()


async def test_a_lane_that_ends_takes_the_next_batch_while_another_still_runs() -> None:
    # Lanes in rounds would hold "late" back until "slow" ended, and "slow" waits for "late".
    late_ran = threading.Event()

    def run_lane(rows: Sequence[str]) -> list[str]:
        if "slow" in rows and not late_ran.wait(timeout=10):
            raise TimeoutError("the next batch never started beside a running lane")
        if "late" in rows:
            late_ran.set()
        return [row.upper() for row in rows]

    batcher: DynamicBatcher[str, str] = DynamicBatcher(
        refuse, max_batch_size=1, max_wait_s=0.0, inline=True, lanes=2, run_lane=run_lane
    )
    async with asyncio.timeout(60):
        slow = asyncio.ensure_future(batcher.submit(["slow"]))
        assert await batcher.submit(["fast"]) == ["FAST"]
        assert await batcher.submit(["late"]) == ["LATE"]
        assert await slow == ["SLOW"]
    await batcher.close()
