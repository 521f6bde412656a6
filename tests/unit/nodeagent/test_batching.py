from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

import numpy as np
import pytest

from nodeagent.adapters.base import batch_runner, run_rows
from nodeagent.adapters.embedding import EmbeddingAdapter, EmbeddingResult
from nodeagent.runtimes.onnx import OnnxRuntimeCpu
from nodeagent.worker.batching import DynamicBatcher, plan_batch
from streams.codes import ServingError


class RecordingRun:
    """A batch function that records each call's rows (and can be told to block or fail)."""

    def __init__(self, poison: str | None = None) -> None:
        self.calls: list[list[str]] = []
        self.poison = poison
        self.release = threading.Event()
        self.release.set()

    def __call__(self, rows: Sequence[str]) -> list[str]:
        self.release.wait(5)
        self.calls.append(list(rows))
        if self.poison is not None and self.poison in rows:
            raise ValueError(f"cannot process {self.poison}")
        return [row.upper() for row in rows]


async def test_concurrent_minilm_submissions_share_runtime_calls_and_get_their_own_rows(
    embedding_adapter: EmbeddingAdapter, minilm_runtime: OnnxRuntimeCpu
) -> None:
    batcher: DynamicBatcher[str, EmbeddingResult] = DynamicBatcher(
        batch_runner(embedding_adapter, minilm_runtime), max_batch_size=16, max_wait_s=0.05
    )
    requests = [[f"sentence number {i} about topic {i % 3}"] * (1 + i % 2) for i in range(12)]
    results = await asyncio.gather(*(batcher.submit(texts) for texts in requests))
    await batcher.close()
    assert batcher.runtime_calls < len(requests)
    for texts, got in zip(requests, results, strict=True):
        expected = run_rows(embedding_adapter, minilm_runtime, texts)
        assert len(got) == len(texts)
        for mine, alone in zip(got, expected, strict=True):
            np.testing.assert_allclose(mine.vector, alone.vector, atol=1e-4)
            assert mine.token_count == alone.token_count


async def test_rows_are_routed_to_their_callers_in_order() -> None:
    run = RecordingRun()
    batcher: DynamicBatcher[str, str] = DynamicBatcher(run, max_batch_size=8, max_wait_s=0.05)
    requests = [[f"r{i}-a", f"r{i}-b"][: 1 + i % 2] for i in range(10)]
    results = await asyncio.gather(*(batcher.submit(items) for items in requests))
    assert results == [[item.upper() for item in items] for items in requests]
    assert all(len(call) <= 8 for call in run.calls)
    assert len(run.calls) < len(requests)
    assert sum(len(call) for call in run.calls) == sum(len(r) for r in requests)
    await batcher.close()


async def test_a_full_batch_runs_without_waiting_for_the_timer() -> None:
    run = RecordingRun()
    batcher: DynamicBatcher[str, str] = DynamicBatcher(run, max_batch_size=4, max_wait_s=30.0)
    async with asyncio.timeout(5):
        results = await asyncio.gather(*(batcher.submit([f"x{i}"]) for i in range(4)))
    assert results == [["X0"], ["X1"], ["X2"], ["X3"]]
    assert run.calls == [["x0", "x1", "x2", "x3"]]
    await batcher.close()


async def test_an_inline_batcher_runs_its_batches_on_the_loop_thread_and_still_batches() -> None:
    threads: list[int] = []

    def run(rows: Sequence[str]) -> list[str]:
        threads.append(threading.get_ident())
        return [row.upper() for row in rows]

    batcher: DynamicBatcher[str, str] = DynamicBatcher(run, max_batch_size=8, max_wait_s=0.0, inline=True)
    results = await asyncio.gather(*(batcher.submit([f"x{i}"]) for i in range(5)))
    assert results == [["X0"], ["X1"], ["X2"], ["X3"], ["X4"]]
    assert threads == [threading.get_ident()]  # one runtime call, on this (the loop's) thread
    await batcher.close()


async def test_a_lone_submission_runs_after_max_wait() -> None:
    run = RecordingRun()
    batcher: DynamicBatcher[str, str] = DynamicBatcher(run, max_batch_size=64, max_wait_s=0.02)
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await batcher.submit(["solo"]) == ["SOLO"]
    assert 0.015 <= loop.time() - started < 2.0
    await batcher.close()


async def test_oversized_submission_is_split_across_calls() -> None:
    run = RecordingRun()
    batcher: DynamicBatcher[str, str] = DynamicBatcher(run, max_batch_size=3, max_wait_s=0.0)
    items = [str(i) for i in range(7)]
    assert await batcher.submit(items) == items
    assert [len(call) for call in run.calls] == [3, 3, 1]
    await batcher.close()


async def test_token_budget_limits_padded_batch_size() -> None:
    run = RecordingRun()
    batcher: DynamicBatcher[str, str] = DynamicBatcher(
        run, max_batch_size=100, max_wait_s=0.05, max_batch_tokens=20, count_tokens=len
    )
    items = ["aaaaa"] * 8  # 5 tokens each: at most 4 rows per batch
    results = await asyncio.gather(*(batcher.submit([item]) for item in items))
    assert results == [["AAAAA"]] * 8
    assert [len(call) for call in run.calls] == [4, 4]
    await batcher.close()


async def test_a_failing_row_fails_only_its_caller() -> None:
    run = RecordingRun(poison="bad")
    batcher: DynamicBatcher[str, str] = DynamicBatcher(run, max_batch_size=8, max_wait_s=0.05)
    outcomes = await asyncio.gather(
        batcher.submit(["ok1"]), batcher.submit(["bad", "x"]), batcher.submit(["ok2"]), return_exceptions=True
    )
    assert outcomes[0] == ["OK1"]
    assert outcomes[2] == ["OK2"]
    assert isinstance(outcomes[1], ValueError)
    await batcher.close()


async def test_wrong_result_count_is_invalid_output() -> None:
    batcher: DynamicBatcher[str, str] = DynamicBatcher(lambda rows: ["only one"], max_wait_s=0.0)
    with pytest.raises(ServingError) as raised:
        await batcher.submit(["a", "b"])
    assert raised.value.code == "INVALID_OUTPUT"
    await batcher.close()


async def test_cancelled_caller_is_skipped_and_others_still_served() -> None:
    run = RecordingRun()
    batcher: DynamicBatcher[str, str] = DynamicBatcher(run, max_batch_size=8, max_wait_s=0.05)
    doomed = asyncio.ensure_future(batcher.submit(["gone"]))
    await asyncio.sleep(0)  # let it enqueue
    doomed.cancel()
    assert await batcher.submit(["kept"]) == ["KEPT"]
    assert run.calls == [["kept"]]
    await batcher.close()


async def test_close_fails_queued_and_in_flight_callers() -> None:
    run = RecordingRun()
    run.release.clear()  # the first batch blocks in the executor
    batcher: DynamicBatcher[str, str] = DynamicBatcher(run, max_batch_size=1, max_wait_s=0.0)
    pending = [asyncio.ensure_future(batcher.submit([f"p{i}"])) for i in range(3)]
    await asyncio.sleep(0.05)
    await batcher.close()
    run.release.set()
    for task in pending:
        with pytest.raises(ServingError) as raised:
            await task
        assert raised.value.code == "INFERENCE_FAILED"
    with pytest.raises(ServingError):
        await batcher.submit(["late"])


def test_plan_batch() -> None:
    assert plan_batch([(2, 5), (2, 5), (2, 5)], max_rows=4, max_padded_tokens=None) == (2, True)
    assert plan_batch([(1, 5)], max_rows=4, max_padded_tokens=None) == (1, False)
    assert plan_batch([(1, 50), (1, 1)], max_rows=4, max_padded_tokens=10) == (1, True)  # first always runs
    assert plan_batch([(1, 3), (1, 3), (1, 6)], max_rows=4, max_padded_tokens=12) == (2, True)
    assert plan_batch([], max_rows=4, max_padded_tokens=None) == (0, False)
