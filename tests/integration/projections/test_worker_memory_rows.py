"""Each worker's memory from telemetry into `worker_memory`: a sample replaces its accelerator's
rows (an unloaded deployment's row goes), an older one changes nothing, and the admin read of
residencies shows the figure beside what the load measured."""

from __future__ import annotations

import httpx
import psycopg

from projections.telemetry import Observation, WorkerFigure, sample_row, write_statement

from .helpers import migrated

MIB = 1 << 20


def sample(at_ms: int, **workers: int) -> Observation:
    figures = [WorkerFigure(deployment, held) for deployment, held in workers.items()]
    return Observation("node-1", "node-1-cpu0", 4096 * MIB, 1024 * MIB, at_ms, figures)


async def write(database_url: str, seen: Observation) -> dict[str, int]:
    """Write `seen` as the telemetry follower does; the worker rows after it."""
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        await conn.execute(write_statement("mf"), sample_row(seen))
        cur = await conn.execute("SELECT deployment_id, worker_bytes FROM mf.worker_memory")
        return {deployment: held for deployment, held in await cur.fetchall()}


async def test_a_sample_replaces_its_accelerators_worker_rows(fresh_database: str) -> None:
    await migrated(fresh_database)
    assert await write(fresh_database, sample(1_000, a=100 * MIB, b=200 * MIB)) == {
        "a": 100 * MIB,
        "b": 200 * MIB,
    }
    assert await write(fresh_database, sample(2_000, a=150 * MIB)) == {"a": 150 * MIB}  # b was unloaded


async def test_an_older_sample_changes_no_worker_row(fresh_database: str) -> None:
    await migrated(fresh_database)
    await write(fresh_database, sample(2_000, a=150 * MIB))
    assert await write(fresh_database, sample(1_500, a=1, b=2)) == {"a": 150 * MIB}


async def test_the_admin_read_of_residencies_shows_each_workers_memory(
    admin: httpx.AsyncClient, fresh_database: str
) -> None:
    async with await psycopg.AsyncConnection.connect(fresh_database, autocommit=True) as conn:
        await conn.execute(
            "INSERT INTO mf.residencies (accelerator_id, deployment_id, node_id, state, measured_bytes)"
            " VALUES ('node-1-cpu0', 'a', 'node-1', 'LOADED', %s), ('node-1-cpu0', 'c', 'node-1', 'COLD', 0)",
            (90 * MIB,),
        )
    await write(fresh_database, sample(1_000, a=120 * MIB))

    response = await admin.get("/residencies")
    assert response.status_code == 200, response.text
    shown = {row["deployment_id"]: (row["measured_bytes"], row["worker_bytes"]) for row in response.json()}
    assert shown == {"a": (90 * MIB, 120 * MIB), "c": (0, None)}
