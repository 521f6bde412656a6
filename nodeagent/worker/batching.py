"""Dynamic batching for one deployment: concurrent submissions share runtime calls.

Submissions queue up; a worker task takes as many whole submissions as fit the batch limits
(rows, padded tokens) once the batch is full or the oldest one has waited `max_wait_s`, runs
them in one runtime call on an executor thread (or, `inline`, on the event loop's own thread),
and routes each caller's rows back to it. Waiting is on an asyncio event with a timeout: no polling.

Lanes: where the runtime offers a one-thread way to run (`run_lane`, `lanes` > 1) and more than
one batch's worth is queued, up to `lanes` batches run at once, each on one executor thread,
rather than one batch on all of them (a runtime's second intra-op thread costs more CPU per row
than a second batch does). Lanes run on, not in rounds: a lane that ends takes the next batch
while the others still run, so no lane waits for the slowest, and the event loop answers and
takes requests meanwhile. A lone batch with no lane busy still runs through `run_batch`, on every
thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from opentelemetry.context import Context

from nodeagent.worker import batch_spans
from streams import codes
from streams.codes import ServingError

ItemT = TypeVar("ItemT")
ResultT = TypeVar("ResultT")


@dataclass
class _Part(Generic[ItemT, ResultT]):
    """A slice of one submission that never straddles two runtime calls."""

    items: list[ItemT]
    longest_tokens: int
    enqueued_at: float
    future: asyncio.Future[list[ResultT]] = field(repr=False)
    traced: tuple[Context | None, int] = (None, 0)  # the submitter's trace, when spans are exported


def plan_batch(
    parts: Sequence[tuple[int, int]], max_rows: int, max_padded_tokens: int | None
) -> tuple[int, bool]:
    """How many leading parts (rows, longest row tokens) one batch takes, and whether it is full.

    Padded tokens (rows × longest row) is what the runtime actually computes over. The first part
    is always taken, even alone over the token budget, or it could never run.
    """
    taken, rows, longest = 0, 0, 0
    for part_rows, part_longest in parts:
        new_rows, new_longest = rows + part_rows, max(longest, part_longest)
        over_tokens = max_padded_tokens is not None and new_rows * new_longest > max_padded_tokens
        if taken and (new_rows > max_rows or over_tokens):
            return taken, True
        taken, rows, longest = taken + 1, new_rows, new_longest
    return taken, rows >= max_rows


# How much more than an even share of the rows planned at once one lane may hold. A lane runs on one thread;
# one batch runs on every thread, at ~0.9 of their sum (docs/performance.md, "Lanes"): lanes left
# more uneven than this finish later than the same rows run as batches one after another.
LANE_SLACK = 1.125


def plan_lanes(
    parts: Sequence[tuple[int, int]], max_rows: int, max_padded_tokens: int | None, lanes: int
) -> list[int]:
    """How many leading parts each of the batches that start at once, with no lane busy, takes:
    one batch where the queue holds one batch's worth (or `lanes` is 1), else up to `lanes`
    batches with their rows evened out, so that no lane idles while another runs a long batch on
    its one thread. Parts are whole (a part is one caller's rows): where they cannot be evened out
    (a lone row beside a full batch), the first batch runs alone, on every thread, and the rest
    waits for it."""
    greedy = _consecutive(parts, max_rows, max_padded_tokens, lanes)
    if len(greedy) <= 1:
        return greedy
    rows = sum(part_rows for part_rows, _ in parts[: sum(greedy)])
    evened = _consecutive(parts, min(max_rows, -(-rows // len(greedy))), max_padded_tokens, len(greedy))
    lane_rows, start = [], 0
    for count in evened:
        lane_rows.append(sum(part_rows for part_rows, _ in parts[start : start + count]))
        start += count
    if max(lane_rows) * len(lane_rows) > LANE_SLACK * sum(lane_rows):
        return greedy[:1]
    return evened


def _consecutive(
    parts: Sequence[tuple[int, int]], max_rows: int, max_padded_tokens: int | None, batches: int
) -> list[int]:
    counts: list[int] = []
    start = 0
    while start < len(parts) and len(counts) < batches:
        taken, _ = plan_batch(parts[start:], max_rows, max_padded_tokens)
        counts.append(taken)
        start += taken
    return counts


class DynamicBatcher(Generic[ItemT, ResultT]):
    def __init__(
        self,
        run_batch: Callable[[Sequence[ItemT]], Sequence[ResultT]],
        *,
        max_batch_size: int = 32,
        max_wait_s: float = 0.005,
        max_batch_tokens: int | None = None,
        count_tokens: Callable[[ItemT], int] | None = None,
        executor: Executor | None = None,
        inline: bool = False,
        lanes: int = 1,
        run_lane: Callable[[Sequence[ItemT]], Sequence[ResultT]] | None = None,
    ) -> None:
        if max_batch_size < 1 or max_wait_s < 0:
            raise ValueError("max_batch_size must be ≥ 1 and max_wait_s ≥ 0")
        if max_batch_tokens is not None and count_tokens is None:
            raise ValueError("max_batch_tokens needs count_tokens")
        self._run_batch = run_batch
        self.max_batch_size = max_batch_size
        self.max_wait_s = max_wait_s
        self.max_batch_tokens = max_batch_tokens
        self._count_tokens = count_tokens
        self._executor = executor
        # Inline: each runtime call blocks the event loop. Right where that loop serves nothing but
        # this batcher (a worker process): it saves handing every batch to a thread and waking the
        # loop again when it ends, two thread wakeups a request (bench/agent.py's worker hop).
        # Submissions that arrive meanwhile wait in the socket and form the next batch.
        self.inline = inline
        self.lanes = lanes
        self.run_lane = run_lane  # one batch on one thread; `run_batch` where None
        self._queue: deque[_Part[ItemT, ResultT]] = deque()
        self._wakeup = asyncio.Event()
        self._worker: asyncio.Task[None] | None = None
        self._in_flight: list[list[_Part[ItemT, ResultT]]] = []  # one entry a running batch
        self._lanes_running: set[asyncio.Task[None]] = set()
        self._closed = False
        self.runtime_calls = 0
        self.rows_run = 0

    async def submit(self, items: Sequence[ItemT]) -> list[ResultT]:
        """Results for exactly `items`, in order; or the exception their batch raised."""
        if self._closed:
            raise ServingError(codes.INFERENCE_FAILED.code, "the batcher is closed")
        if not items:
            return []
        loop = asyncio.get_running_loop()
        if self._worker is None or self._worker.done():
            self._worker = loop.create_task(self._work())
        parts = self._split(list(items), loop)
        self._queue.extend(parts)
        self._wakeup.set()
        try:
            chunks = await asyncio.gather(*(part.future for part in parts))
        except BaseException:
            for part in parts:  # the worker skips parts nobody waits for
                part.future.cancel()
            raise
        return [result for chunk in chunks for result in chunk]

    async def close(self) -> None:
        self._closed = True
        tasks = [task for task in (self._worker, *self._lanes_running) if task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        # Parts of a batch cut short by the cancel would otherwise wait forever.
        for part in [*(part for batch in self._in_flight for part in batch), *self._queue]:
            _fail(part, ServingError(codes.INFERENCE_FAILED.code, "the batcher closed"))
        self._queue.clear()
        self._in_flight = []

    def _split(self, items: list[ItemT], loop: asyncio.AbstractEventLoop) -> list[_Part[ItemT, ResultT]]:
        tokens = [self._count_tokens(item) for item in items] if self._count_tokens else [0] * len(items)
        traced = batch_spans.submitted()
        parts: list[_Part[ItemT, ResultT]] = []
        start = 0
        while start < len(items):
            # Rows of one submission go in as many batch-sized slices as it needs.
            taken, _ = plan_batch(
                [(1, t) for t in tokens[start:]], self.max_batch_size, self.max_batch_tokens
            )
            end = start + taken
            parts.append(
                _Part(items[start:end], max(tokens[start:end]), loop.time(), loop.create_future(), traced)
            )
            start = end
        return parts

    def _shapes(self) -> list[tuple[int, int]]:
        return [(len(part.items), part.longest_tokens) for part in self._queue]

    def _plan(self) -> tuple[int, bool]:
        return plan_batch(self._shapes(), self.max_batch_size, self.max_batch_tokens)

    async def _work(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            while self._queue and self._queue[0].future.done():
                self._queue.popleft()  # cancelled callers
            if not self._queue or len(self._lanes_running) >= self._lane_count():
                self._wakeup.clear()
                await self._wakeup.wait()  # a submission, or a lane that ended
                continue
            deadline = self._queue[0].enqueued_at + self.max_wait_s
            while not self._plan()[1] and (remaining := deadline - loop.time()) > 0:
                self._wakeup.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(remaining):
                        await self._wakeup.wait()
            # With lanes busy, what is queued goes to one more lane; with none, it is planned over
            # all of them, and runs as one batch on every thread where it is one batch's worth.
            counts = self._lane_plan() if not self._lanes_running else [self._plan()[0]]
            batches = [[self._queue.popleft() for _ in range(count)] for count in counts]
            live = [
                alive for batch in batches if (alive := [part for part in batch if not part.future.done()])
            ]
            if not self._lanes_running and len(batches) == 1 and live:
                self._in_flight.append(live[0])
                await self._execute(live[0], self._run_batch, inline=self.inline)
                self._in_flight.remove(live[0])
                continue
            for batch in live:
                self._start_lane(batch)

    def _lane_count(self) -> int:
        return self.lanes if self.run_lane is not None else 1

    def _lane_plan(self) -> list[int]:
        return plan_lanes(self._shapes(), self.max_batch_size, self.max_batch_tokens, self._lane_count())

    def _start_lane(self, batch: list[_Part[ItemT, ResultT]]) -> None:
        self._in_flight.append(batch)
        task = asyncio.get_running_loop().create_task(self._run_lane(batch))
        self._lanes_running.add(task)
        task.add_done_callback(self._lane_ended)

    async def _run_lane(self, batch: list[_Part[ItemT, ResultT]]) -> None:
        try:
            await self._execute(batch, self.run_lane or self._run_batch, inline=False)
        finally:
            self._in_flight.remove(batch)

    def _lane_ended(self, task: asyncio.Task[None]) -> None:
        self._lanes_running.discard(task)
        self._wakeup.set()

    async def _execute(
        self,
        parts: list[_Part[ItemT, ResultT]],
        run: Callable[[Sequence[ItemT]], Sequence[ResultT]],
        *,
        inline: bool,
    ) -> None:
        rows = [item for part in parts for item in part.items]
        traced = [(parent, queued) for parent, queued in (p.traced for p in parts) if parent is not None]
        ran_ns = time.time_ns() if traced else 0
        try:
            results = await self._call(run, rows, inline=inline)
        except Exception as error:
            if traced:
                batch_spans.record(traced, len(rows), ran_ns, time.time_ns(), ok=False)
            if len(parts) == 1:
                _fail(parts[0], error)
                return
            # Someone's rows broke the shared batch: rerun each part alone so that only the
            # caller whose rows fail gets the exception.
            for part in parts:
                try:
                    _succeed(part, await self._call(run, part.items, inline=inline))
                except Exception as part_error:
                    _fail(part, part_error)
            return
        if traced:
            batch_spans.record(traced, len(rows), ran_ns, time.time_ns(), ok=True)
        offset = 0
        for part in parts:
            _succeed(part, results[offset : offset + len(part.items)])
            offset += len(part.items)

    async def _call(
        self, run: Callable[[Sequence[ItemT]], Sequence[ResultT]], rows: list[ItemT], *, inline: bool
    ) -> list[ResultT]:
        if inline:
            results = list(run(rows))
        else:
            loop = asyncio.get_running_loop()
            results = list(await loop.run_in_executor(self._executor, run, rows))
        self.runtime_calls += 1
        self.rows_run += len(rows)
        if len(results) != len(rows):
            raise ServingError(
                codes.INVALID_OUTPUT.code, f"batch of {len(rows)} rows returned {len(results)} results"
            )
        return results


def _succeed(part: _Part[ItemT, ResultT], results: list[ResultT]) -> None:
    if not part.future.done():
        part.future.set_result(results)


def _fail(part: _Part[ItemT, ResultT], error: BaseException) -> None:
    if not part.future.done():
        part.future.set_exception(error)
