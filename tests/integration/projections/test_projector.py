"""The projector applies both streams into the read model, and a replay rebuilds the same digest."""

from __future__ import annotations

import psycopg

from eventstore.store import EventStore
from modelforge.devstack.nats_server import NatsServer
from projections import digest
from projections.replay import replay
from projections.scenario import control_plane, traffic

from .helpers import project_until, publish


async def test_scenario_is_projected_into_rows_and_replays_to_the_same_digest(
    private_nats: NatsServer, private_store: EventStore, fresh_database: str
) -> None:
    target = await publish(private_store, [*control_plane("s1"), *traffic("s1", 300)])
    await project_until(fresh_database, private_nats.url, target)

    async with await psycopg.AsyncConnection.connect(fresh_database, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE status = 'completed') FROM mf.requests"
        )
        total, completed = await cur.fetchone()  # type: ignore[misc]
        assert total == 300
        assert completed > 250
        cur = await conn.execute("SELECT count(*) FROM mf.leases WHERE state = 'active'")
        assert (await cur.fetchone()) == (0,)
        cur = await conn.execute(
            "SELECT state, measured_bytes, load_count FROM mf.residencies ORDER BY 1 LIMIT 1"
        )
        assert (await cur.fetchone()) == ("loaded", 2 * 1024**3, 1)
        cur = await conn.execute("SELECT count(*) FROM mf.audit_log")
        assert (await cur.fetchone()) == (sum(target.values()),)
        live = await digest.digest(conn, "mf")

    rebuilt = await replay(fresh_database, private_nats.url, verify=True, progress=False, batch=97)
    assert rebuilt.digest == live
    assert rebuilt.live_digest == live
    assert rebuilt.differences == []
