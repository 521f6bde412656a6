"""Group commit to accelerator aggregates: decisions stage events, one writer per accelerator
appends them with the expected version.

A decision takes microseconds; an append takes a NATS round trip. Holding the decision lock
across the append would serialise every request on that round trip, so decisions only *stage*
their events (the live view folds them in at once, so the next decision sees them) and wait on
a future. The accelerator's writer appends what has gathered — decision by decision while few
are staged, everything as one atomic batch once many are — and resolves the futures. Each append
expects the version the one before it left, so a decision lands only on the state it was made
on: if another replica appended first, or another writer's event (an agent's, say) was folded in
while ours were staged, the staged run was decided on a stale view, and every waiter gets a
`ConcurrencyConflict`, waits for the view to catch up and decides again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import msgspec

from eventstore.errors import ConcurrencyConflict
from eventstore.records import RecordedEvent
from eventstore.store import ExpectedVersion, Outgoing, prepare
from gateway.serving.context import ServingContext
from streams import subjects
from streams.events.base import Event

log = logging.getLogger("modelforge.gateway.appends")
MAX_BATCH_EVENTS = 256
# While this few events are staged, each decision goes as its own append: an atomic batch costs
# about as much as eight single appends (bench.append), and the first decision's waiter is
# answered after one round trip instead of after the whole batch.
CHAIN_MAX_EVENTS = 8
_ACCELERATOR = subjects.Aggregate.ACCELERATOR


class _Staged(msgspec.Struct):
    events: list[Event]
    correlation_id: str | None
    done: asyncio.Future[int]


def stage(
    ctx: ServingContext, accelerator_id: str, events: Sequence[Event], correlation_id: str | None = None
) -> asyncio.Future[int]:
    """Stage events (call under the decision lock); the future gives the version once appended."""
    ctx.live.stage(accelerator_id, list(events))
    done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    ctx.staged.setdefault(accelerator_id, []).append(_Staged(list(events), correlation_id, done))
    writer = ctx.writers.get(accelerator_id)
    if writer is None or writer.done():
        ctx.writers[accelerator_id] = asyncio.create_task(_write(ctx, accelerator_id))
    return done


async def append_to_accelerator(
    ctx: ServingContext, accelerator_id: str, events: Sequence[Event], correlation_id: str | None = None
) -> int:
    """Stage and wait for the append (for callers that hold no lock across it)."""
    async with ctx.live.decision_lock:
        done = stage(ctx, accelerator_id, events, correlation_id)
    return await done


async def _write(ctx: ServingContext, accelerator_id: str) -> None:
    queue = ctx.staged[accelerator_id]
    while queue:
        if accelerator_id in ctx.live.interrupted:
            # Another writer's event was folded in after these were decided: decide them again.
            version = ctx.live.versions.get(accelerator_id, 0)
            await _refuse(
                ctx, accelerator_id, ConcurrencyConflict(_ACCELERATOR.value, accelerator_id, version, version)
            )
            continue
        batch = _next_batch(queue)
        events = [event for item in batch for event in item.events]
        correlations = [item.correlation_id for item in batch for _ in item.events]
        expected = ctx.live.versions.get(accelerator_id, 0)
        try:
            outgoing = prepare(
                events, _ACCELERATOR, accelerator_id, ctx.actor, None, None, correlation_ids=correlations
            )
            version = await ctx.store.append_prepared(
                _ACCELERATOR, accelerator_id, outgoing, expected or ExpectedVersion.NO_STREAM
            )
        except Exception as exc:  # a conflict, or the store failing: everything staged was decided on sand
            queue[:0] = batch
            if not isinstance(exc, ConcurrencyConflict):
                log.warning("append to %s failed: %r", accelerator_id, exc)
            await _refuse(ctx, accelerator_id, exc)
            continue
        _confirm(ctx, accelerator_id, events, outgoing, version, expected)
        for item in batch:
            if not item.done.done():  # a waiter that was cancelled has nobody to tell
                item.done.set_result(version)
        await ctx.live.notify()


async def _refuse(ctx: ServingContext, accelerator_id: str, error: Exception) -> None:
    """Fail every decision staged on the accelerator with `error` and drop them from the view."""
    queue = ctx.staged[accelerator_id]
    failed = queue[:]
    queue.clear()
    ctx.live.unstage(accelerator_id)
    for item in failed:
        if not item.done.done():
            item.done.set_exception(error)
    await ctx.live.notify()


def _next_batch(queue: list[_Staged]) -> list[_Staged]:
    """The oldest decision alone while few events are staged; else everything staged, up to
    MAX_BATCH_EVENTS, as one atomic batch. A decision's own events always go together."""
    if sum(len(item.events) for item in queue) <= CHAIN_MAX_EVENTS:
        return [queue.pop(0)]
    batch: list[_Staged] = []
    while queue and sum(len(item.events) for item in batch) < MAX_BATCH_EVENTS:
        batch.append(queue.pop(0))
    return batch


def _confirm(
    ctx: ServingContext,
    accelerator_id: str,
    events: list[Event],
    outgoing: list[Outgoing],
    version: int,
    expected: int,
) -> None:
    """Fold the acknowledged events into the confirmed state (the view already shows them), each
    with the envelope it was stored with."""
    first = version - len(events) + 1
    for offset, (event, sent) in enumerate(zip(events, outgoing, strict=True)):
        ctx.live.apply_own(
            RecordedEvent(first + offset, sent.subject, sent.envelope, event),
            expected if offset == 0 else first + offset - 1,
        )
    ctx.live.unstage(accelerator_id, len(events))
    ctx.metrics.appended(events)


async def catch_up_after(ctx: ServingContext, conflict: ConcurrencyConflict, timeout: float) -> None:
    """Someone else appended: wait until our view has folded their events, then decide again."""
    acc = conflict.aggregate_id
    await ctx.live.wait_for(lambda: ctx.live.versions.get(acc, 0) >= conflict.actual, timeout)
