"""`replay --verify` against a live read model that a running projector keeps moving."""

from __future__ import annotations

import asyncio

import psycopg

from eventstore.store import EventStore
from modelforge.devstack.nats_server import NatsServer
from projections import projector
from projections.migrate import lock_key
from projections.replay import replay
from projections.scenario import control_plane, traffic
from projections.wait import ProjectionWaiter
from streams.subjects import EVENTS_STREAM, REQUESTS_STREAM

from .helpers import project_until, publish

INTO = "mf_replay_verify"


async def until_waiting_for_advisory_lock(conn: psycopg.AsyncConnection[object]) -> None:
    """Until another session waits for an advisory lock (the replay, building its schema)."""
    async with asyncio.timeout(60):
        while True:  # each read sees the lock table as it is; nothing is timed
            cur = await conn.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
            )
            if await cur.fetchone() == (1,):
                return
            await asyncio.sleep(0.05)


async def test_verify_with_the_projector_running_and_events_appended_meanwhile_reports_identical(
    private_nats: NatsServer, private_store: EventStore, fresh_database: str
) -> None:
    before = await publish(private_store, [*control_plane("v1"), *traffic("v1", 100)])
    stop = asyncio.Event()
    live = asyncio.create_task(projector.run(fresh_database, private_nats.url, stop=stop, telemetry=False))
    waiter = await ProjectionWaiter.open(fresh_database)
    try:
        for stream, seq in before.items():
            assert await waiter.wait(seq, stream, timeout=60)
        async with await psycopg.AsyncConnection.connect(fresh_database, autocommit=True) as gate:
            # The replay stops where it builds its schema, once it has read where the live one stands;
            # meanwhile more events are appended and the live projector applies them.
            await gate.execute("SELECT pg_advisory_lock(hashtext(%s))", (lock_key(INTO, "migrate"),))
            replaying = asyncio.create_task(
                replay(fresh_database, private_nats.url, schema=INTO, verify=True, progress=False)
            )
            await until_waiting_for_advisory_lock(gate)
            # (these requests ended while their gateway held their acceptance: one record each)
            during = await publish(private_store, [*control_plane("v2"), *traffic("v2", 100, carried=True)])
            for stream, seq in during.items():
                assert await waiter.wait(seq, stream, timeout=60)
            await gate.execute("SELECT pg_advisory_unlock(hashtext(%s))", (lock_key(INTO, "migrate"),))
            result = await replaying
    finally:
        stop.set()
        async with asyncio.timeout(10):
            await live
        await waiter.close()
    assert result.checkpoints == {
        EVENTS_STREAM: before[EVENTS_STREAM],
        REQUESTS_STREAM: before[REQUESTS_STREAM],
    }
    assert result.differences == []
    assert result.live_digest == result.digest


async def test_verify_names_the_rows_that_differ_from_the_replay_and_the_side_that_has_them(
    private_nats: NatsServer, private_store: EventStore, fresh_database: str
) -> None:
    target = await publish(private_store, control_plane("v3", clients=3))
    await project_until(fresh_database, private_nats.url, target)
    async with await psycopg.AsyncConnection.connect(fresh_database, autocommit=True) as conn:
        await conn.execute("UPDATE mf.clients SET name = 'changed' WHERE client_id = 'v3-client0'")
        await conn.execute("DELETE FROM mf.clients WHERE client_id = 'v3-client2'")
    result = await replay(fresh_database, private_nats.url, schema=INTO, verify=True, progress=False)
    assert result.differences == ["clients (v3-client0): differs", f"clients (v3-client2): only in {INTO}"]
