"""A gateway replica that vanished leaves requests open that name no lease of their own (run under
a slot of its standby lease, or waiting in its line): once its standby lease expires, a survivor
fails them on the record, and leaves a request still named by a lease on the books to that
lease's own expiry."""

from __future__ import annotations

import asyncio
import time
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
from tests.support.fleet_events import last_sequence, stored_events, stored_until

GHOST = "ghost-replica"
CAPABILITY = "rag.embedding@1"


async def test_requests_a_vanished_replica_left_open_are_failed_once_its_standby_lease_expires(
    stack: Stack, read_model_database: str
) -> None:
    accelerator = await make_resident(stack)
    stop = asyncio.Event()
    projecting = asyncio.create_task(
        projector.run(read_model_database, stack.nats_url, stop=stop, telemetry=False)
    )
    from_sequence = await last_sequence(stack.connection, subjects.REQUESTS_STREAM) + 1
    own = lease_granted(
        "ghost-own-lease",
        accelerator,
        datetime.fromtimestamp(time.time() + 600, UTC),
        reserved_bytes=1 << 20,
        deployment_id=stack.deployment_id,
        request_id="ghost-leased",
    )
    standby = msgspec.structs.replace(
        lease_granted(
            standby_lease_id("ghost"),
            accelerator,
            datetime.fromtimestamp(time.time() + 1.0, UTC),
            reserved_bytes=1 << 20,
            deployment_id=stack.deployment_id,
        ),
        request_id="",
        client_id=holder_of(GHOST),
    )
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
