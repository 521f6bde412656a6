"""A gateway replica that vanished leaves requests open that name no lease of their own (run under
a slot of its standby lease, or waiting in its line): once its standby lease expires, a survivor
fails them on the record, and leaves a request still named by a lease on the books to that
lease's own expiry; a survivor whose read model is not projected at the expiry fails them once the
projector has caught up."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime

import msgspec

from eventstore.store import ExpectedVersion
from gateway.scheduler.standby import holder_of, standby_lease_id
from projections import projector
from streams import subjects
from streams.events import serving as s
from streams.events.requests import RequestFailed
from streams.subjects import Aggregate
from tests.integration.gateway.conftest import Stack
from tests.integration.gateway.residents import make_resident
from tests.integration.projections.helpers import accepted
from tests.support.events import lease_granted
from tests.support.fleet_events import StoredEvent, last_sequence, stored_events, stored_until

GHOST = "ghost-replica"
CAPABILITY = "rag.embedding@1"


def _lease(
    lease_id: str, accelerator: str, deployment_id: str, seconds: float, request_id: str
) -> s.LeaseGranted:
    """A lease of 1 MiB that expires `seconds` from now."""
    expires = datetime.fromtimestamp(time.time() + seconds, UTC)
    return lease_granted(
        lease_id,
        accelerator,
        expires,
        reserved_bytes=1 << 20,
        deployment_id=deployment_id,
        request_id=request_id,
    )


def _standby_lease(replica: str, accelerator: str, deployment_id: str) -> s.LeaseGranted:
    """A standby lease of `replica` (which renews it no more) that expires a second from now."""
    lease = _lease(standby_lease_id(replica), accelerator, deployment_id, 1.0, "")
    return msgspec.structs.replace(lease, client_id=holder_of(replica))


async def test_requests_a_vanished_replica_left_open_are_failed_once_its_standby_lease_expires(
    stack: Stack, read_model_database: str
) -> None:
    accelerator = await make_resident(stack)
    stop = asyncio.Event()
    projecting = asyncio.create_task(
        projector.run(read_model_database, stack.nats_url, stop=stop, telemetry=False)
    )
    from_sequence = await last_sequence(stack.connection, subjects.REQUESTS_STREAM) + 1
    own = _lease("ghost-own-lease", accelerator, stack.deployment_id, 600, "ghost-leased")
    standby = _standby_lease(GHOST, accelerator, stack.deployment_id)
    try:
        for request_id in ("ghost-left-open", "ghost-finished", "ghost-leased"):
            await stack.store.record_request(CAPABILITY, request_id, accepted(request_id, GHOST))
        finished = RequestFailed(
            request_id="ghost-finished",
            client_id="c",
            capability=CAPABILITY,
            code="INTERNAL_ERROR",
            http_status=500,
        )
        await stack.store.record_request(CAPABILITY, "ghost-finished", finished)
        await stack.store.append(Aggregate.ACCELERATOR, accelerator, [own, standby], ExpectedVersion.ANY)
        await stored_until(
            stack.connection,
            subjects.REQUESTS_STREAM,
            from_sequence,
            lambda e: isinstance(e.event, RequestFailed) and e.event.request_id == "ghost-left-open",
        )
        await stack.gateway.settled()
        failures = [
            e.event
            for e in await stored_events(stack.connection, subjects.REQUESTS_STREAM, from_sequence)
            if isinstance(e.event, RequestFailed)
        ]
    finally:
        released = s.LeaseReleased(lease_id=own.lease_id, accelerator_id=accelerator, outcome="completed")
        await stack.store.append(Aggregate.ACCELERATOR, accelerator, [released], ExpectedVersion.ANY)
        stop.set()
        async with asyncio.timeout(30):
            await projecting
    assert [(f.request_id, f.code) for f in failures] == [
        ("ghost-finished", "INTERNAL_ERROR"),
        ("ghost-left-open", "LEASE_TIMEOUT"),
    ]


async def test_a_survivor_fails_what_a_vanished_replica_left_open_once_a_projector_down_at_the_expiry_catches_up(
    stack: Stack, read_model_database: str
) -> None:
    accelerator = await make_resident(stack)
    requests_from = await last_sequence(stack.connection, subjects.REQUESTS_STREAM) + 1
    ghost = "ghost-replica-unprojected"
    await stack.store.record_request(
        CAPABILITY, "unprojected-left-open", accepted("unprojected-left-open", ghost)
    )
    standby = _standby_lease(ghost, accelerator, stack.deployment_id)
    # a lease of its own, expiring after the standby lease
    later = _lease("unprojected-own-lease", accelerator, stack.deployment_id, 2.0, "unprojected-leased")
    await stack.store.append(Aggregate.ACCELERATOR, accelerator, [standby, later], ExpectedVersion.ANY)

    def failed(request_id: str) -> Callable[[StoredEvent], bool]:
        return lambda e: isinstance(e.event, RequestFailed) and e.event.request_id == request_id

    # With no projector writing its read model, the survivor's rounds go on past the standby lease's
    # expiry (they do not wait for the read model): the later lease expires, its request is failed.
    await stored_until(
        stack.connection, subjects.REQUESTS_STREAM, requests_from, failed("unprojected-leased")
    )
    stop = asyncio.Event()
    projecting = asyncio.create_task(
        projector.run(read_model_database, stack.nats_url, stop=stop, telemetry=False)
    )
    try:  # the survivor has waited for the read model: once it is projected, the open request fails
        left_open = await stored_until(
            stack.connection, subjects.REQUESTS_STREAM, requests_from, failed("unprojected-left-open")
        )
        await stack.gateway.settled()
    finally:
        stop.set()
        async with asyncio.timeout(30):
            await projecting
    assert left_open[-1].event.code == "LEASE_TIMEOUT"  # type: ignore[attr-defined]
