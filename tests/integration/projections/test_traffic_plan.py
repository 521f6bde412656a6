"""The console's traffic read (requests finished in a recent window) reads an index, not the whole
requests table: a console polls it every few seconds."""

from __future__ import annotations

import time

import psycopg

from gateway.admin.console_reads import FINISHED_SQL

from .helpers import migrated


async def test_the_traffic_read_takes_the_windows_rows_from_an_index(fresh_database: str) -> None:
    await migrated(fresh_database)
    async with await psycopg.AsyncConnection.connect(fresh_database, autocommit=True) as conn:
        await conn.execute(
            "INSERT INTO mf.requests (request_id, capability, status, total_ms, finished_at)"
            " SELECT 'req-' || i, 'rag.embedding@1', 'completed', 5, now() - i * interval '10 seconds'"
            " FROM generate_series(1, 50000) AS i"
        )
        await conn.execute("ANALYZE mf.requests")
        await conn.execute("SET search_path TO mf")
        cur = await conn.execute(("EXPLAIN " + FINISHED_SQL).encode(), (time.time() - 3600,))
        plan = "\n".join(str(row[0]) for row in await cur.fetchall())
    assert "requests_finished_at" in plan, plan
    assert "Seq Scan" not in plan, plan
