"""Appending to an accelerator aggregate from the gateway, and applying our own append at once.

Decisions are taken and appended under the live view's decision lock with the accelerator's
expected version; after a successful append the events are folded locally (nothing else can
have landed in between), so the next decision sees them without waiting for the echo.
"""

from __future__ import annotations

from collections.abc import Sequence

from eventstore.errors import ConcurrencyConflict
from eventstore.records import RecordedEvent
from eventstore.store import ExpectedVersion
from gateway.serving.context import ServingContext
from streams import subjects
from streams.envelope import Envelope, new_id, utcnow
from streams.events.base import Event


async def append_to_accelerator(
    ctx: ServingContext, accelerator_id: str, events: Sequence[Event], correlation_id: str | None = None
) -> int:
    """Append with the expected version; raises ConcurrencyConflict when the view is behind."""
    expected = ctx.live.versions.get(accelerator_id, 0)
    version = await ctx.store.append(
        subjects.Aggregate.ACCELERATOR,
        accelerator_id,
        list(events),
        expected or ExpectedVersion.NO_STREAM,
        actor=ctx.actor,
        correlation_id=correlation_id,
    )
    at = utcnow()
    first = version - len(events) + 1
    for offset, event in enumerate(events):
        envelope = Envelope(
            event_id=new_id(),
            event_type=type(event).event_type(),
            schema_version=type(event).schema_version,
            aggregate_type=subjects.Aggregate.ACCELERATOR.value,
            aggregate_id=accelerator_id,
            occurred_at=at,
            actor=ctx.actor,
            correlation_id=correlation_id,
        )
        record = RecordedEvent(first + offset, "", envelope, event)
        ctx.live.apply_own(record, expected if offset == 0 else first + offset - 1)
    await ctx.live.notify()
    return version


async def catch_up_after(ctx: ServingContext, conflict: ConcurrencyConflict, timeout: float) -> None:
    """Someone else appended: wait until our view has folded their events, then decide again."""
    acc = conflict.aggregate_id
    await ctx.live.wait_for(lambda: ctx.live.versions.get(acc, 0) >= conflict.actual, timeout)
