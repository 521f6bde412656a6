"""Writes off a response's path that decide nothing (a lease given back, a job's failure put on
the books, a request's record), retried until the event log takes them.

Giving up on the first failure left leases on the books until their TTL: after a stream leader was
lost, 43 releases failed and the node ran one request at a time for minutes. Such a write is tried
again until acknowledged, until it is no longer needed (the lease expired or was released by
someone else), or until the gateway closes. The tasks are the context's `background` set, which
`/metrics` counts (`modelforge_background_writes`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime

from nats.errors import Error as NatsError

from eventstore.errors import ConcurrencyConflict, EventStoreError
from eventstore.store import Outgoing, prepare_request
from gateway.serving.appends import append_to_accelerator, catch_up_after
from gateway.serving.context import ServingContext
from streams.events.base import Event

log = logging.getLogger("modelforge.gateway.background")
NATS_FAILURES = (NatsError, TimeoutError)  # a publish or request that NATS did not complete
# A failed attempt (no stream leader, the connection lost, a stream refusing) is made again after
# this back-off, doubling up to the most, or sooner when the live view changes. The most is short:
# a lease not yet released holds capacity, so a write should land within a second of the stream
# taking messages again (an election takes seconds); one try a second per waiting write is cheap.
RETRY_FIRST_S, RETRY_MOST_S = 0.1, 1.0
CATCH_UP_S = 5.0  # how long a conflict's retry waits for the view to reach the winner's events


async def until_recorded(
    ctx: ServingContext,
    what: str,
    attempt: Callable[[], Awaitable[object]],
    unnecessary: Callable[[], bool] = lambda: False,
) -> bool:
    """Make `attempt` until it succeeds (True), or `unnecessary()`, or the gateway closes (False).
    A conflict is made again once the view has caught up; any other failure after a back-off."""
    backoff = RETRY_FIRST_S
    while not unnecessary():
        try:
            await attempt()
            return True
        except ConcurrencyConflict as conflict:
            await catch_up_after(ctx, conflict, CATCH_UP_S)
            continue
        except (EventStoreError, *NATS_FAILURES) as failure:
            if ctx.closing.is_set():
                log.warning("%s not recorded before closing: %r", what, failure)
                return False
            log.warning("%s not recorded (%r); again in %.1f s", what, failure, backoff)
        await ctx.live.wait_for(lambda: unnecessary() or ctx.closing.is_set(), backoff)
        backoff = min(backoff * 2, RETRY_MOST_S)
    return False


async def append_until_recorded(
    ctx: ServingContext,
    accelerator_id: str,
    events: Sequence[Event],
    unnecessary: Callable[[], bool] = lambda: False,
) -> bool:
    """Append events that decide nothing to the accelerator, until recorded (see `until_recorded`)."""
    what = f"{type(events[0]).__name__} on {accelerator_id}"
    return await until_recorded(
        ctx, what, lambda: append_to_accelerator(ctx, accelerator_id, events), unnecessary
    )


def record_request(
    ctx: ServingContext, capability: str, request_id: str, event: Event, occurred_at: datetime | None = None
) -> None:
    """Record a per-request event off the response's path, retried with the same id until taken
    (the rollback guards read how it ended from MF_REQUESTS, with every other replica's);
    `occurred_at`: when it happened, where that was before now."""
    outgoing = prepare_request(capability, request_id, event, ctx.actor, occurred_at)
    if ctx.recorder is not None:
        ctx.recorder.record(outgoing, lambda _, first: _record_again(ctx, outgoing, first))
    else:
        _record_again(ctx, outgoing)


def _record_again(ctx: ServingContext, outgoing: Outgoing, first: Exception | None = None) -> None:
    """Record `outgoing` in a task of its own, until taken (`first`: why the recorder could not)."""
    what = f"{outgoing.envelope.event_type} of {outgoing.envelope.aggregate_id}"
    if first is not None:
        log.warning("%s not recorded (%r); again", what, first)
    task = ctx.spawn(until_recorded(ctx, what, lambda: ctx.store.record_prepared_request(outgoing)))
    ctx.recording.add(task)
    task.add_done_callback(ctx.recording.discard)
