"""A PostgreSQL session that ends under the read side (restart, failover, `pg_terminate_backend`)
is a lost database, not a bad event: the projector, its telemetry follower and the read-your-writes
waiter connect again and carry on (the first from the stored checkpoints)."""

from __future__ import annotations

import asyncio
import json
import time

import psycopg
import pytest

from eventstore.store import EventStore
from modelforge.devstack.nats_server import NatsServer
from projections import projector
from projections.wait import ProjectionWaiter, wait_for_sequence
from streams import subjects
from streams.events import control as c
from streams.events import requests as r
from streams.subjects import Aggregate

from .helpers import checkpoints, migrated, publish


async def terminate_sessions(database_url: str) -> int:
    """End every other session on this test's own database, as a database restart would."""
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        row = await cur.fetchone()
        assert row is not None
        return int(row[0])


def clients(prefix: str, count: int) -> list[tuple[Aggregate, str, c.ClientCreated]]:
    return [
        (
            Aggregate.CLIENT,
            f"{prefix}{i}",
            c.ClientCreated(
                client_id=f"{prefix}{i}",
                name=f"{prefix}{i}",
                scopes=("rag.embedding@1",),
                requests_per_minute=60,
                max_concurrency=2,
            ),
        )
        for i in range(count)
    ]


async def projected(database_url: str, sequence: int, running: asyncio.Task[None]) -> bool:
    """Whether MF_EVENTS gets applied through `sequence` (False when the projector ends first)."""
    waiting = asyncio.create_task(wait_for_sequence(database_url, sequence, timeout=60))
    await asyncio.wait({waiting, running}, return_when=asyncio.FIRST_COMPLETED)
    if running.done():
        waiting.cancel()
        running.result()  # its error, if it failed
        return False
    return waiting.result()


async def fetch_one(database_url: str, query: str) -> object:
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        row = await (await conn.execute(query)).fetchone()
        assert row is not None
        return row[0]


async def test_the_projector_connects_again_when_its_database_session_is_terminated(
    private_nats: NatsServer, private_store: EventStore, fresh_database: str
) -> None:
    stop = asyncio.Event()
    running = asyncio.create_task(projector.run(fresh_database, private_nats.url, stop=stop, telemetry=False))
    try:
        first = await publish(private_store, clients("a", 3))
        assert await projected(fresh_database, first["MF_EVENTS"], running)
        for outage in range(2):
            assert await terminate_sessions(fresh_database) >= 1  # the projector's own session
            more = await publish(private_store, clients(f"b{outage}-", 5))
            assert await projected(fresh_database, more["MF_EVENTS"], running)
        assert not running.done()
    finally:
        stop.set()
        async with asyncio.timeout(10):
            await running
    # Every event once: one row and one audit line each, the checkpoint at the last one.
    assert await fetch_one(fresh_database, "SELECT count(*) FROM mf.clients") == 13
    assert await fetch_one(fresh_database, "SELECT count(*) FROM mf.audit_log") == 13
    assert (await checkpoints(fresh_database))["MF_EVENTS"] == more["MF_EVENTS"]


async def test_a_row_the_database_refuses_still_stops_the_projection_naming_its_event(
    private_nats: NatsServer, private_store: EventStore, fresh_database: str
) -> None:
    too_many = r.RequestAccepted(
        request_id="req-big",
        client_id="c",
        capability="rag.embedding@1",
        input_sha256="0" * 64,
        shape_bucket="items:1",
        items=2**40,  # requests.items is an int: out of range (SQLSTATE 22003), on any connection
    )
    bad = await private_store.record_request("rag.embedding@1", "req-big", too_many)
    with pytest.raises(
        projector.ProjectionHalted, match=f"MF_REQUESTS sequence {bad} .*NumericValueOutOfRange"
    ):
        async with asyncio.timeout(30):
            await projector.run(fresh_database, private_nats.url, telemetry=False)


async def test_a_waiter_whose_session_is_terminated_listens_again_and_wakes_for_later_commits(
    private_nats: NatsServer, private_store: EventStore, fresh_database: str
) -> None:
    await migrated(fresh_database)
    waiter = await ProjectionWaiter.open(fresh_database)
    stop = asyncio.Event()
    running: asyncio.Task[None] | None = None
    try:
        assert await terminate_sessions(fresh_database) == 1  # the waiter's: no projector runs yet
        running = asyncio.create_task(
            projector.run(fresh_database, private_nats.url, stop=stop, telemetry=False)
        )
        seq = (await publish(private_store, clients("w", 1)))["MF_EVENTS"]
        assert await waiter.wait(seq, timeout=30)
    finally:
        stop.set()
        if running is not None:
            async with asyncio.timeout(10):
                await running
        await waiter.close()


async def observe(store: EventStore, used_bytes: int) -> None:
    observation = {
        "node_id": "node-1",
        "accelerator_id": "gpu-0",
        "total_bytes": 80 * 2**30,
        "used_bytes": used_bytes,
        "observed_at_unix_ms": int(time.time() * 1000),
    }
    await store.client.jetstream().publish(
        f"{subjects.TELEMETRY_PREFIX}.node-1.gpu-0", json.dumps(observation).encode()
    )


async def telemetry_shows(database_url: str, used_bytes: int, running: asyncio.Task[None]) -> bool:
    """Whether the telemetry row reaches `used_bytes` (it has no checkpoint to wait on: look at it)."""
    for _ in range(300):
        if running.done():
            running.result()
            return False
        rows = await fetch_all(database_url, "SELECT used_bytes FROM mf.telemetry")
        if rows == [(used_bytes,)]:
            return True
        await asyncio.sleep(0.1)
    return False


async def fetch_all(database_url: str, query: str) -> list[tuple[object, ...]]:
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        return await (await conn.execute(query)).fetchall()


async def test_the_telemetry_follower_connects_again_when_its_database_session_is_terminated(
    private_nats: NatsServer, private_store: EventStore, fresh_database: str
) -> None:
    await migrated(fresh_database)
    stop = asyncio.Event()
    running = asyncio.create_task(projector.run(fresh_database, private_nats.url, stop=stop, telemetry=True))
    try:
        await observe(private_store, 1 * 2**30)
        assert await telemetry_shows(fresh_database, 1 * 2**30, running)
        assert await terminate_sessions(fresh_database) >= 2  # the projector's and the follower's
        await observe(private_store, 2 * 2**30)
        assert await telemetry_shows(fresh_database, 2 * 2**30, running)
    finally:
        stop.set()
        async with asyncio.timeout(10):
            await running
