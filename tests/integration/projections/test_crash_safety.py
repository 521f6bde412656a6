"""Exactly once across SIGKILLs, one active projector per stream at a time, and every worker
following a swapped-in replay, and a supervisor that holds none of the projection's code (real
subprocesses: `modelforge projector` and its one worker process per stream)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg

from eventstore.store import EventStore
from modelforge.devstack.nats_server import NatsServer
from projections import digest
from projections.replay import replay
from projections.scenario import control_plane, traffic
from projections.wait import ProjectionWaiter, wait_for_sequence

from .helpers import publish, publish_raw

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
            start_new_session=True,  # its own process group: `crash` kills it with its workers
        )


def crash(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the projector and its workers at once, as a machine or container dying would."""
    with contextlib.suppress(ProcessLookupError):  # the whole group is gone already
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(10)


def kill_supervisor(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the supervisor alone: its workers must notice and stop by themselves."""
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
                crash(process)
        process = spawn_projector(fresh_database, private_nats.url, 1000, tmp_path / "p.log")
        try:
            assert await waiter.wait(target["MF_EVENTS"], "MF_EVENTS", timeout=60)
            assert await waiter.wait(target["MF_REQUESTS"], "MF_REQUESTS", timeout=60)
        finally:
            crash(process)
    finally:
        await waiter.close()

    async with await psycopg.AsyncConnection.connect(fresh_database, autocommit=True) as conn:
        live = await digest.digest(conn, "mf")
        cur = await conn.execute("SELECT count(*), count(DISTINCT (stream, seq)) FROM mf.audit_log")
        assert await cur.fetchone() == (sum(target.values()), sum(target.values()))
    clean = await replay(fresh_database, private_nats.url, progress=False)
    assert clean.digest == live


async def test_a_second_projector_waits_and_takes_over_when_the_first_supervisor_dies(
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
            # The second one's workers block on the advisory locks: per stream one holder, one waiter.
            while True:  # wakes on each lock-state read; the wait itself is server-side
                cur = await conn.execute(
                    "SELECT count(*) FILTER (WHERE granted), count(*) FILTER (WHERE NOT granted)"
                    " FROM pg_locks WHERE locktype = 'advisory'"
                )
                granted, waiting = await cur.fetchone()  # type: ignore[misc]
                if waiting == 2:
                    break
                assert second.poll() is None, (tmp_path / "b.log").read_text()
                await waiter.wait(10**12, timeout=0.2)  # a bounded wait for the second to connect
            assert granted == 2
        more = await publish(private_store, traffic("t1b", 100))
        assert await waiter.wait(more["MF_REQUESTS"], "MF_REQUESTS", timeout=60)
        assert "active instance" not in (tmp_path / "b.log").read_text()
        kill_supervisor(first)  # its workers see their stdin close and release their locks
        last = await publish(private_store, traffic("t1c", 100))
        assert await waiter.wait(last["MF_REQUESTS"], "MF_REQUESTS", timeout=60), (
            tmp_path / "b.log"
        ).read_text()
        assert await waiter.wait(last["MF_EVENTS"], "MF_EVENTS", timeout=60)
        assert (tmp_path / "b.log").read_text().count("is the active instance") == 2
    finally:
        await waiter.close()
        for process in (first, second):
            if process is not None:
                crash(process)
    async with await psycopg.AsyncConnection.connect(fresh_database, autocommit=True) as conn:
        live = await digest.digest(conn, "mf")
    assert (await replay(fresh_database, private_nats.url, progress=False)).digest == live


@contextlib.asynccontextmanager
async def caught_up_projector(
    nats: NatsServer, store: EventStore, database_url: str, log: Path, scenario: str
) -> AsyncIterator[subprocess.Popen[bytes]]:
    """A `modelforge projector` that has projected a scenario's traffic on both streams."""
    target = await publish(store, [*control_plane(scenario), *traffic(scenario, 100)])
    process = spawn_projector(database_url, nats.url, 100, log)
    try:
        for stream in ("MF_EVENTS", "MF_REQUESTS"):
            assert await wait_for_sequence(database_url, target[stream], stream, timeout=60)
        yield process
    finally:
        crash(process)


async def test_the_supervisor_loads_no_database_driver_while_its_workers_project(
    private_nats: NatsServer, private_store: EventStore, fresh_database: str, tmp_path: Path
) -> None:
    async with caught_up_projector(
        private_nats, private_store, fresh_database, tmp_path / "p.log", "m1"
    ) as process:
        maps = await asyncio.to_thread(Path(f"/proc/{process.pid}/maps").read_text)
        assert "psycopg" not in maps


def workers_left(process: subprocess.Popen[bytes]) -> bool:
    try:
        os.killpg(process.pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_sigterm_stops_the_projector_and_its_workers_cleanly(
    private_nats: NatsServer, private_store: EventStore, fresh_database: str, tmp_path: Path
) -> None:
    async with caught_up_projector(
        private_nats, private_store, fresh_database, tmp_path / "p.log", "s1"
    ) as process:
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0, (tmp_path / "p.log").read_text()
        assert not workers_left(process)


async def test_a_stream_that_halts_stops_every_worker_and_the_projector_exits_2_naming_the_event(
    private_nats: NatsServer, private_store: EventStore, fresh_database: str, tmp_path: Path
) -> None:
    await publish(private_store, [*control_plane("h1"), *traffic("h1", 100)])
    bad = await publish_raw(private_store, "mf.evt.client.h1.ClientDisabled", "ClientDisabled", b'{"nope":1}')
    process = spawn_projector(fresh_database, private_nats.url, 100, tmp_path / "p.log")
    try:
        assert process.wait(60) == 2
        assert f"MF_EVENTS sequence {bad} (ClientDisabled)" in (tmp_path / "p.log").read_text()
        assert not workers_left(process)
    finally:
        crash(process)


async def test_every_worker_resumes_after_a_swap_to_before_any_event_while_requests_keep_arriving(
    private_nats: NatsServer, private_store: EventStore, fresh_database: str, tmp_path: Path
) -> None:
    # `replay --until-time <before any event> --swap` leaves the live schema without checkpoints:
    # each worker's next commit finds its checkpoint moved and it must start again from sequence 1.
    # A worker whose stream reader was receiving at that moment waited for the reader forever
    # (its connection idle after the ROLLBACK, holding its lock, nothing logged). Requests keep
    # arriving across each swap so that moment is hit; three swaps make missing it unlikely.
    before_any_event = datetime.now(UTC) - timedelta(seconds=1)
    last = await publish(private_store, [*control_plane("w1"), *traffic("w1", 20)])
    log = tmp_path / "p.log"
    rounds = 0

    async def requests_keep_arriving(swapped: asyncio.Event) -> None:
        nonlocal rounds
        after_swap = 0
        while after_swap < 10:
            after_swap += swapped.is_set()
            rounds += 1
            more = await publish(private_store, traffic(f"live{rounds}", 10, seed=rounds), window=10)
            for stream, seq in more.items():
                last[stream] = max(last[stream], seq)

    process = spawn_projector(fresh_database, private_nats.url, 1000, log)
    waiter = await ProjectionWaiter.open(fresh_database)
    try:
        for stream, seq in last.items():
            assert await waiter.wait(seq, stream, timeout=60), log.read_text()
        for swap in range(1, 4):
            swapped = asyncio.Event()
            arriving = asyncio.create_task(requests_keep_arriving(swapped))
            try:
                rebuilt = await replay(
                    fresh_database, private_nats.url, until_time=before_any_event, swap=True, progress=False
                )
                swapped.set()
                await arriving
            finally:
                arriving.cancel()
            assert rebuilt.checkpoints == {}  # nothing before the cut: no checkpoint rows at all
            for stream, seq in last.items():
                assert await waiter.wait(seq, stream, timeout=30), (
                    f"{stream} after swap {swap}:\n{log.read_text()}"
                )
    finally:
        crash(process)
        await waiter.close()
    async with await psycopg.AsyncConnection.connect(fresh_database, autocommit=True) as conn:
        cur = await conn.execute("SELECT count(*) FROM mf.requests")
        assert await cur.fetchone() == (20 + 10 * rounds,)
