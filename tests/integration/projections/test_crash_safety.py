"""Exactly once across SIGKILLs, and one active projector at a time (real subprocesses)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import psycopg

from eventstore.store import EventStore
from modelforge.devstack.nats_server import NatsServer
from projections import digest
from projections.replay import replay
from projections.scenario import control_plane, traffic
from projections.wait import ProjectionWaiter

from .helpers import publish

ROOT = Path(__file__).resolve().parents[3]


def spawn_projector(database_url: str, nats_url: str, batch_max: int, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "DATABASE_URL": database_url, "NATS_URL": nats_url}
    with open(log, "ab") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "modelforge.cli",
                "projector",
                "--batch-max",
                str(batch_max),
                "--no-telemetry",
            ],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )


def kill(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGKILL)
    process.wait(10)


async def test_sigkill_at_random_points_neither_loses_nor_repeats_an_event(
    private_nats: NatsServer, private_store: EventStore, fresh_database: str, tmp_path: Path
) -> None:
    target = await publish(private_store, [*control_plane("k1"), *traffic("k1", 1500, seed=11)])
    assert target["MF_EVENTS"] + target["MF_REQUESTS"] > 5000
    rnd = random.Random(2024)
    waiter = await ProjectionWaiter.open(fresh_database)
    try:
        kills = sorted(rnd.sample(range(50, target["MF_REQUESTS"] - 50), 5))
        for point in kills:
            process = spawn_projector(
                fresh_database, private_nats.url, rnd.choice([7, 64, 500]), tmp_path / "p.log"
            )
            try:
                assert await waiter.wait(point, "MF_REQUESTS", timeout=60), (tmp_path / "p.log").read_text()
            finally:
                kill(process)
        process = spawn_projector(fresh_database, private_nats.url, 1000, tmp_path / "p.log")
        try:
            assert await waiter.wait(target["MF_EVENTS"], "MF_EVENTS", timeout=60)
            assert await waiter.wait(target["MF_REQUESTS"], "MF_REQUESTS", timeout=60)
        finally:
            kill(process)
    finally:
        await waiter.close()

    async with await psycopg.AsyncConnection.connect(fresh_database, autocommit=True) as conn:
        live = await digest.digest(conn, "mf")
        cur = await conn.execute("SELECT count(*), count(DISTINCT (stream, seq)) FROM mf.audit_log")
        assert await cur.fetchone() == (sum(target.values()), sum(target.values()))
    clean = await replay(fresh_database, private_nats.url, progress=False)
    assert clean.digest == live


async def test_a_second_projector_waits_and_takes_over_when_the_first_dies(
    private_nats: NatsServer, private_store: EventStore, fresh_database: str, tmp_path: Path
) -> None:
    first_part = await publish(private_store, [*control_plane("t1"), *traffic("t1", 200)])
    waiter = await ProjectionWaiter.open(fresh_database)
    first = spawn_projector(fresh_database, private_nats.url, 100, tmp_path / "a.log")
    second = None
    try:
        assert await waiter.wait(first_part["MF_REQUESTS"], "MF_REQUESTS", timeout=60)
        second = spawn_projector(fresh_database, private_nats.url, 100, tmp_path / "b.log")
        async with await psycopg.AsyncConnection.connect(fresh_database, autocommit=True) as conn:
            # The second one blocks on the advisory lock: one granted holder, one waiter.
            while True:  # wakes on each lock-state read; the wait itself is server-side
                cur = await conn.execute(
                    "SELECT count(*) FILTER (WHERE granted), count(*) FILTER (WHERE NOT granted)"
                    " FROM pg_locks WHERE locktype = 'advisory'"
                )
                granted, waiting = await cur.fetchone()  # type: ignore[misc]
                if waiting == 1:
                    break
                assert second.poll() is None, (tmp_path / "b.log").read_text()
                await waiter.wait(10**12, timeout=0.2)  # a bounded wait for the second to connect
            assert granted == 1
        more = await publish(private_store, traffic("t1b", 100))
        assert await waiter.wait(more["MF_REQUESTS"], "MF_REQUESTS", timeout=60)
        assert "active instance" not in (tmp_path / "b.log").read_text()
        kill(first)
        last = await publish(private_store, traffic("t1c", 100))
        assert await waiter.wait(last["MF_REQUESTS"], "MF_REQUESTS", timeout=60), (
            tmp_path / "b.log"
        ).read_text()
        assert await waiter.wait(last["MF_EVENTS"], "MF_EVENTS", timeout=60)
        assert "active instance" in (tmp_path / "b.log").read_text()
    finally:
        await waiter.close()
        for process in (first, second):
            if process is not None and process.poll() is None:
                kill(process)
    async with await psycopg.AsyncConnection.connect(fresh_database, autocommit=True) as conn:
        live = await digest.digest(conn, "mf")
    assert (await replay(fresh_database, private_nats.url, progress=False)).digest == live
