"""A completed probe's row carries what its model files weigh beside what the process's memory
showed (the envelope's figures); rows projected before that column existed get it from the audit
log's copy of their event."""

from __future__ import annotations

import psycopg

from eventstore.store import EventStore
from modelforge.devstack.nats_server import NatsServer
from projections import digest
from projections.migrate import migrate
from projections.replay import replay
from streams.subjects import Aggregate
from tests.unit.promotion.builders import completed

from .helpers import projected

WEIGHED = completed(candidate_id="cand-w", probe_id="probe-w", weights_bytes=64)
OLDER = completed(candidate_id="cand-o", probe_id="probe-o")  # recorded before agents sent the weights
ROWS = [("probe-o", 300, 0), ("probe-w", 300, 64)]


async def probes(conn: psycopg.AsyncConnection[tuple[object, ...]]) -> list[tuple[object, ...]]:
    cur = await conn.execute("SELECT probe_id, loaded_bytes, weights_bytes FROM mf.probes ORDER BY 1")
    return await cur.fetchall()


async def test_a_completed_probe_row_carries_its_model_files_weight_and_older_rows_get_it_by_migration(
    private_nats: NatsServer, private_store: EventStore, fresh_database: str
) -> None:
    items = [(Aggregate.CANDIDATE, probe.candidate_id, probe) for probe in (OLDER, WEIGHED)]
    await projected(private_store, fresh_database, private_nats.url, items)
    async with await psycopg.AsyncConnection.connect(fresh_database, autocommit=True) as conn:
        assert await probes(conn) == ROWS
        # As a schema projected by a build without 010 left it.
        await conn.execute("DELETE FROM mf.schema_migrations WHERE version = 10")
        await conn.execute("ALTER TABLE mf.probes DROP COLUMN weights_bytes")
        assert await migrate(conn, "mf") == [10]
        assert await probes(conn) == ROWS
        live = await digest.digest(conn, "mf")
    rebuilt = await replay(fresh_database, private_nats.url, progress=False)
    assert rebuilt.digest == live
