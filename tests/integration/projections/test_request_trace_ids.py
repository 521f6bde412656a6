"""A request's row in the read model keeps the W3C trace id its events recorded."""

from __future__ import annotations

import msgspec
import psycopg

from eventstore.store import EventStore
from modelforge.devstack.nats_server import NatsServer
from streams import subjects
from streams.events import requests as r

from .helpers import accepted, project_until

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"


async def trace_id_of(database_url: str, request_id: str) -> object:
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        cur = await conn.execute("SELECT trace_id FROM mf.requests WHERE request_id = %s", (request_id,))
        row = await cur.fetchone()
    assert row is not None
    return row[0]


async def test_a_requests_row_keeps_the_trace_id_of_its_events(
    private_nats: NatsServer, private_store: EventStore, fresh_database: str
) -> None:
    traced = msgspec.structs.replace(accepted("req-traced"), trace_id=TRACE_ID)
    refused = r.RequestRejected(
        request_id="req-refused",
        client_id="c",
        capability="rag.embedding@1",
        code="RATE_LIMITED",
        http_status=429,
        trace_id=TRACE_ID,
    )
    await private_store.record_request("rag.embedding@1", "req-traced", traced)
    last = await private_store.record_request("rag.embedding@1", "req-refused", refused)

    await project_until(fresh_database, private_nats.url, {subjects.REQUESTS_STREAM: last})

    assert await trace_id_of(fresh_database, "req-traced") == TRACE_ID
    assert await trace_id_of(fresh_database, "req-refused") == TRACE_ID


async def test_a_request_recorded_before_tracing_has_no_trace_id(
    private_nats: NatsServer, private_store: EventStore, fresh_database: str
) -> None:
    last = await private_store.record_request("rag.embedding@1", "req-old", accepted("req-old"))

    await project_until(fresh_database, private_nats.url, {subjects.REQUESTS_STREAM: last})

    assert await trace_id_of(fresh_database, "req-old") is None
