"""The admin request history (newest first, all or one client's) reads an index, not a sort of the
whole requests table, on a fresh schema and on one migrated from before the indexes existed; so
does the console's traffic read (the requests finished in a recent window), which a console polls."""

from __future__ import annotations

import time

import psycopg

from gateway.admin.console_reads import FINISHED_SQL
from gateway.admin.reads import REQUESTS_SQL
from projections.migrate import migrate

from .helpers import migrated

INDEXES = {"requests_accepted_at", "requests_client_accepted_at"}


async def plans(database_url: str, rows: str, queries: list[tuple[str, tuple[object, ...]]]) -> list[str]:
    """The plans of `queries` exactly as the admin API sends them (values as parameters), on a
    fresh schema holding 50,000 requests: `rows` is "(columns) SELECT values" with row i's values."""
    await migrated(database_url)
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        await conn.execute(f"INSERT INTO mf.requests {rows} FROM generate_series(1, 50000) AS i".encode())
        await conn.execute("ANALYZE mf.requests")
        await conn.execute("SET search_path TO mf")
        out = []
        for query, params in queries:
            cur = await conn.execute(("EXPLAIN " + query).encode(), params)
            out.append("\n".join(str(row[0]) for row in await cur.fetchall()))
        return out


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
    everyone, one_client = await plans(
        fresh_database,
        "(request_id, client_id, status, accepted_at)"
        " SELECT 'req-' || i, 'client-' || (i % 200), 'completed', now() - i * interval '1 second'",
        [(REQUESTS_SQL, (None, None, 100)), (REQUESTS_SQL, ("client-7", "client-7", 100))],
    )
    assert "requests_accepted_at" in everyone, everyone
    assert "Sort" not in everyone, everyone
    assert "requests_client_accepted_at" in one_client, one_client
    assert "Sort" not in one_client, one_client


async def test_the_traffic_read_takes_the_windows_rows_from_an_index(fresh_database: str) -> None:
    [plan] = await plans(
        fresh_database,
        "(request_id, capability, status, total_ms, finished_at)"
        " SELECT 'req-' || i, 'rag.embedding@1', 'completed', 5, now() - i * interval '10 seconds'",
        [(FINISHED_SQL, (time.time() - 3600,))],
    )
    assert "requests_finished_at" in plan, plan
    assert "Seq Scan" not in plan, plan
