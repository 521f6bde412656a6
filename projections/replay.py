"""`modelforge replay`: rebuild the read model from sequence 1 into a fresh schema.

Optionally only "as of" a point: `until_seq` (MF_EVENTS sequence; MF_REQUESTS is then cut at the
time that event was stored, unless `until_requests_seq` says otherwise) or `until_time` (both
streams cut at the time the server stored each message). Prints a digest; `verify` replays up to
the live checkpoints and compares with the live schema, both read in one snapshot taken at the
start (a running projector does not make them differ); `swap` renames the rebuilt schema into
place atomically.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql

from projections import digest, horizon, source
from projections.batch import ProjectionHalted
from projections.digest import TableDigest
from projections.migrate import LIVE_SCHEMA, check_schema, migrate
from projections.progress import Progress
from projections.replay_worker import halted_from
from projections.snapshot import LiveSnapshot
from streams import subjects

BATCH = 20_000
Conn = psycopg.AsyncConnection[Any]


class ReplayFailed(Exception):
    """A replay worker ended without applying its stream (its own error is on stderr)."""


class SwapRefused(ReplayFailed):
    """The rebuilt schema lacks request history the live one holds (aged out of MF_REQUESTS)."""


@dataclass
class Replayed:
    schema: str
    checkpoints: dict[str, int]
    digest: str
    tables: dict[str, TableDigest]
    events: int
    seconds: float
    differences: list[str] = field(default_factory=list)
    live_digest: str | None = None
    swapped_out: str | None = None
    requests_from: int = 1  # the first MF_REQUESTS sequence rebuilt: later when older ones aged out


async def _follow(stream: str, worker: asyncio.subprocess.Process, bar: Progress) -> tuple[str, int]:
    """Read a worker's report lines (see `projections.replay_worker`); its stream's checkpoint."""
    assert worker.stdout is not None
    checkpoint: int | None = None
    halted: ProjectionHalted | None = None
    async for line in worker.stdout:
        kind, _, rest = line.decode().strip().partition(" ")
        if kind == "applied":
            bar.update(int(rest))
        elif kind == "checkpoint":
            checkpoint = int(rest)
        elif kind == "halted":
            halted = halted_from(stream, rest)
    code = await worker.wait()
    if halted is not None:
        raise halted
    if code != 0 or checkpoint is None:
        raise ReplayFailed(f"replaying {stream} failed: its worker exited with status {code}")
    return stream, checkpoint


async def _apply_streams(
    database_url: str,
    nats_urls: str | None,
    schema: str,
    cuts: dict[str, tuple[int, int | None]],
    bar: Progress,
    batch: int,
) -> dict[str, int]:
    """Apply each stream up to its cut (sequence, stored time) in a worker process of its own;
    returns the checkpoints. The first failure stops the others."""
    env = {**os.environ, "DATABASE_URL": database_url}
    if nats_urls:
        env["NATS_URL"] = nats_urls
    workers: dict[str, asyncio.subprocess.Process] = {}
    tasks: list[asyncio.Task[tuple[str, int]]] = []
    try:
        for stream, (until_seq, until_ns) in cuts.items():
            if until_seq <= 0:
                continue
            args = [
                "--stream",
                stream,
                "--schema",
                schema,
                "--until-seq",
                str(until_seq),
                "--batch",
                str(batch),
            ]
            workers[stream] = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "projections.replay_worker",
                *args,
                *(["--until-ns", str(until_ns)] if until_ns is not None else []),
                stdin=asyncio.subprocess.PIPE,  # a worker stops when this closes: it never outlives us
                stdout=asyncio.subprocess.PIPE,
                env=env,
            )
            tasks.append(asyncio.create_task(_follow(stream, workers[stream], bar)))
        if tasks:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                task.result()  # raises the first failure
        return {stream: seq for stream, seq in (task.result() for task in tasks) if seq}
    finally:
        for task in tasks:
            task.cancel()
        for worker in workers.values():
            if worker.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    worker.kill()
                await worker.wait()


async def replay(
    database_url: str,
    nats_urls: str | None = None,
    *,
    until_seq: int | None = None,
    until_requests_seq: int | None = None,
    until_time: datetime | None = None,
    schema: str | None = None,
    verify: bool = False,
    swap: bool = False,
    live: str = LIVE_SCHEMA,
    progress: bool = True,
    batch: int = BATCH,
) -> Replayed:
    if until_time is not None and until_time.tzinfo is None:
        raise ValueError("until_time needs a UTC offset: a naive time would be read as local time")
    schema = check_schema(schema or f"{live}_replay_{uuid.uuid4().hex[:8]}")
    started = time.perf_counter()
    # verify: where the live schema stands and what it holds, read in one snapshot (see
    # projections.snapshot), so a projector committing meanwhile changes neither
    at_live = await LiveSnapshot.open(database_url, live) if verify else None
    conn = await psycopg.AsyncConnection.connect(database_url, autocommit=True, prepare_threshold=None)
    try:
        targets = {}
        for stream in (subjects.EVENTS_STREAM, subjects.REQUESTS_STREAM):
            _first, last = await source.last_sequence(stream, nats_urls)
            targets[stream] = last
        if at_live is not None and until_seq is None and until_time is None:
            targets = {s: at_live.checkpoints.get(s, 0) for s in targets}  # the live schema's point
        if until_seq is not None:
            targets[subjects.EVENTS_STREAM] = min(until_seq, targets[subjects.EVENTS_STREAM])
        if until_requests_seq is not None:
            targets[subjects.REQUESTS_STREAM] = min(until_requests_seq, targets[subjects.REQUESTS_STREAM])
        until_ns = None if until_time is None else int(until_time.timestamp() * 1e9)
        requests_ns = until_ns
        if until_seq is not None and until_requests_seq is None and until_time is None:
            # as of the time event `until_seq` was stored
            last_event = targets[subjects.EVENTS_STREAM]
            requests_ns = (
                await source.stored_ns(subjects.EVENTS_STREAM, last_event, nats_urls) if last_event else 0
            )
        await migrate(conn, schema)
        bar = Progress(sum(targets.values()), f"replay -> {schema}", progress)
        try:
            expected = await _apply_streams(
                database_url,
                nats_urls,
                schema,
                {
                    subjects.EVENTS_STREAM: (targets[subjects.EVENTS_STREAM], until_ns),
                    subjects.REQUESTS_STREAM: (targets[subjects.REQUESTS_STREAM], requests_ns),
                },
                bar,
                batch,
            )
        finally:
            bar.close()
        # a second connection shares out the digests' hashing (PostgreSQL runs one core per query)
        helper = await psycopg.AsyncConnection.connect(database_url, autocommit=True, prepare_threshold=None)
        async with helper:
            first_request = await horizon.requests_from(conn, schema)
            scope = horizon.comparable(live, first_request) if verify else {}
            tables = await digest.table_digests(conn, schema, [helper], scope)
            result = Replayed(
                schema,
                expected,
                digest.combine(tables),
                tables,
                sum(expected.values()),
                time.perf_counter() - started,
                requests_from=first_request,
            )
        if at_live is not None:
            live_tables = await at_live.table_digests(scope)
            result.live_digest = digest.combine(live_tables)
            for table in sorted(set(tables) | set(live_tables)):
                if tables.get(table) != live_tables.get(table):
                    if table in tables and table in live_tables:
                        result.differences += await digest.row_differences(
                            (at_live.conn, live), (conn, schema), table, scope=scope
                        )
                    else:
                        result.differences.append(f"{table}: table present on one side only")
            await at_live.close()  # its reads hold locks on the live tables that a swap must take
        if swap:
            result.swapped_out = await swap_in(conn, schema, live)
        return result
    finally:
        await conn.close()
        if at_live is not None:
            await at_live.close()


async def swap_in(conn: Conn, schema: str, live: str = LIVE_SCHEMA) -> str | None:
    """Make `schema` the live one in one transaction; returns the old live schema's new name.

    The exclusive lock on the live checkpoints waits for a running projector's batch to commit;
    that projector then finds the checkpoint moved and resumes from the swapped-in schema's.
    Refused (SwapRefused) while the live schema holds MF_REQUESTS history `schema` lacks because it
    aged out of the stream (see projections.horizon): the swap would drop it.
    """
    old = f"{live}_old_{time.strftime('%Y%m%d%H%M%S')}_{uuid.uuid4().hex[:4]}"
    async with conn.transaction():
        cur = await conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (live,))
        exists = await cur.fetchone() is not None
        if exists:
            await conn.execute(
                sql.SQL("LOCK TABLE {}.checkpoints IN ACCESS EXCLUSIVE MODE").format(sql.Identifier(live))
            )
            first = await horizon.requests_from(conn, schema)
            if older := await horizon.older_requests(conn, live, first):
                raise SwapRefused(
                    f"not swapped: {live} holds {older} MF_REQUESTS message(s) before sequence {first},"
                    f" which aged out of the stream and are not in {schema}; swapping would drop their"
                    f" request history ({schema} is kept: drop it, or rename it by hand to accept the loss)"
                )
            await conn.execute(
                sql.SQL("ALTER SCHEMA {} RENAME TO {}").format(sql.Identifier(live), sql.Identifier(old))
            )
        await conn.execute(
            sql.SQL("ALTER SCHEMA {} RENAME TO {}").format(sql.Identifier(schema), sql.Identifier(live))
        )
    return old if exists else None
