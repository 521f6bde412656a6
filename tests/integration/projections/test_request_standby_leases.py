"""A completed request's row names the standby lease it ran under (none: it had its own lease)."""

from __future__ import annotations

import psycopg

from eventstore.store import EventStore
from modelforge.devstack.nats_server import NatsServer
from streams import subjects
from streams.events import requests as r

from .helpers import accepted, project_until


def completed(request_id: str, standby_lease_id: str = "") -> r.RequestCompleted:
    return r.RequestCompleted(
        request_id=request_id,
        client_id="c",
        capability="rag.embedding@1",
        deployment_id="d",
        node_id="n",
        accelerator_id="a",
        cold=False,
        latency=r.LatencyBreakdown(),
        usage=r.Usage(items=1),
        standby_lease_id=standby_lease_id,
    )


async def standby_lease_of(database_url: str, request_id: str) -> object:
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT status, standby_lease_id FROM mf.requests WHERE request_id = %s", (request_id,)
        )
        row = await cur.fetchone()
    assert row is not None
    assert row[0] == "completed"
    return row[1]


async def test_a_request_served_under_a_standby_lease_names_it_and_one_with_its_own_lease_none(
    private_nats: NatsServer, private_store: EventStore, fresh_database: str
) -> None:
    for request_id, standby in (("req-standby", "standby-1"), ("req-own", "")):
        await private_store.record_request("rag.embedding@1", request_id, accepted(request_id))
        last = await private_store.record_request(
            "rag.embedding@1", request_id, completed(request_id, standby)
        )

    await project_until(fresh_database, private_nats.url, {subjects.REQUESTS_STREAM: last})

    assert await standby_lease_of(fresh_database, "req-standby") == "standby-1"
    assert await standby_lease_of(fresh_database, "req-own") is None
