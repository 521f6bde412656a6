"""The admin request history (newest first, all or one client's) reads an index, not a sort of the
whole requests table, on a fresh schema and on one migrated from before the indexes existed."""

from __future__ import annotations

import psycopg

from gateway.admin.reads import REQUESTS_SQL
from projections.migrate import migrate

from .helpers import migrated

INDEXES = {"requests_accepted_at", "requests_client_accepted_at"}


async def plan(conn: psycopg.AsyncConnection[tuple[object, ...]], client_id: str | None) -> str:
    """The plan of the query exactly as the admin API sends it (values as parameters)."""
    cur = await conn.execute(("EXPLAIN " + REQUESTS_SQL).encode(), (client_id, client_id, 100))
    return "\n".join(str(row[0]) for row in await cur.fetchall())


async def test_a_schema_from_before_the_indexes_gets_them_when_migrated(fresh_database: str) -> None:
    await migrated(fresh_database)
    async with await psycopg.AsyncConnection.connect(fresh_database, autocommit=True) as conn:
        # As a database last migrated at version 4 was: no history indexes, 5 not recorded.
        await conn.execute("DROP INDEX mf.requests_accepted_at, mf.requests_client_accepted_at")
        await conn.execute("DELETE FROM mf.schema_migrations WHERE version = 5")
        assert await migrate(conn, "mf") == [5]
        cur = await conn.execute(
            "SELECT indexname FROM pg_indexes WHERE schemaname = 'mf' AND tablename = 'requests'"
        )
        assert {row[0] for row in await cur.fetchall()} >= INDEXES


async def test_the_request_history_reads_its_newest_rows_from_an_index(fresh_database: str) -> None:
    await migrated(fresh_database)
    async with await psycopg.AsyncConnection.connect(fresh_database, autocommit=True) as conn:
        await conn.execute(
            "INSERT INTO mf.requests (request_id, client_id, status, accepted_at)"
            " SELECT 'req-' || i, 'client-' || (i % 200), 'completed', now() - i * interval '1 second'"
            " FROM generate_series(1, 50000) AS i"
        )
        await conn.execute("ANALYZE mf.requests")
        await conn.execute("SET search_path TO mf")
        everyone = await plan(conn, None)
        one_client = await plan(conn, "client-7")
    assert "requests_accepted_at" in everyone, everyone
    assert "Sort" not in everyone, everyone
    assert "requests_client_accepted_at" in one_client, one_client
    assert "Sort" not in one_client, one_client
