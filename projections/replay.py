"""`modelforge replay`: rebuild the read model from sequence 1 into a fresh schema.

Optionally only "as of" a point: `until_seq` (MF_EVENTS sequence; MF_REQUESTS is then cut at the
time that event was stored, unless `until_requests_seq` says otherwise) or `until_time` (both
streams cut at the time the server stored each message). Prints a digest; `verify` compares with
the live schema at the live checkpoints; `swap` renames the rebuilt schema into place atomically.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql

from projections import digest, source
from projections.batch import Catalog
from projections.digest import TableDigest
from projections.migrate import LIVE_SCHEMA, check_schema, migrate
from projections.pipeline import Pipeline
from projections.progress import Progress
from projections.writer import Writer
from streams import subjects

BATCH = 20_000
READ_AHEAD_CHUNKS = 64  # chunks of up to one socket read each: backpressure on the reader
Conn = psycopg.AsyncConnection[Any]


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


async def live_checkpoints(conn: Conn, schema: str = LIVE_SCHEMA) -> dict[str, int]:
    try:
        cur = await conn.execute(
            sql.SQL("SELECT stream, last_seq FROM {}.checkpoints").format(sql.Identifier(schema))
        )
    except psycopg.errors.UndefinedTable:
        return {}
    return {stream: seq for stream, seq in await cur.fetchall()}


async def _read_ahead(
    chunks: AsyncIterator[list[source.Delivery]],
) -> AsyncGenerator[list[source.Delivery], None]:
    """`chunks`, read by a task of its own into a bounded queue: the stream keeps arriving while
    this coroutine awaits a prepare or a commit, instead of only between them."""
    queue: asyncio.Queue[list[source.Delivery] | BaseException | None] = asyncio.Queue(READ_AHEAD_CHUNKS)

    async def pump() -> None:
        try:
            async for chunk in chunks:
                await queue.put(chunk)
            await queue.put(None)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # handed to the reader, which raises it
            await queue.put(exc)

    task = asyncio.create_task(pump())
    try:
        while (item := await queue.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


async def _apply_stream(
    writer: Writer,
    stream: str,
    until_seq: int,
    until_ns: int | None,
    expected: dict[str, int],
    nats_urls: str | None,
    bar: Progress,
    batch: int,
) -> tuple[dict[str, int], int | None]:
    """Apply `stream` up to `until_seq` (and stored at or before `until_ns`); returns the
    checkpoints and the stored time of the last event applied. Batch n+1 is read (in its own
    task, see `_read_ahead`) and prepared while batch n commits (projections.pipeline)."""
    pipeline = Pipeline(writer, expected)
    deliveries: list[source.Delivery] = []
    last_ns: int | None = None
    reading = _read_ahead(source.read(stream, 1, until_seq, urls=nats_urls))
    try:
        async for chunk in reading:
            cut = False
            if until_ns is not None:  # up to the first message stored after the cut
                for index, delivery in enumerate(chunk):
                    if delivery.stored_ns > until_ns:
                        chunk, cut = chunk[:index], True
                        break
            if chunk:
                deliveries += chunk
                last_ns = chunk[-1].stored_ns
            if len(deliveries) >= batch or (cut and deliveries):
                bar.update(await pipeline.submit([(stream, deliveries)]))
                deliveries = []
            if cut:
                break
        if deliveries:
            bar.update(await pipeline.submit([(stream, deliveries)]))
        bar.update(await pipeline.finish())
    finally:
        await reading.aclose()  # stops the reader task now, not when the generator is collected
        await pipeline.close()
    return pipeline.expected, last_ns


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
    schema = check_schema(schema or f"{live}_replay_{uuid.uuid4().hex[:8]}")
    started = time.perf_counter()
    conn = await psycopg.AsyncConnection.connect(database_url, autocommit=True, prepare_threshold=None)
    try:
        # The rebuilt schema is not live until verified and swapped: a crash loses only the replay.
        await conn.execute("SET synchronous_commit TO off")
        at_live = await live_checkpoints(conn, live) if verify else {}
        targets = {}
        for stream in (subjects.EVENTS_STREAM, subjects.REQUESTS_STREAM):
            _first, last = await source.last_sequence(stream, nats_urls)
            targets[stream] = last
        if verify and until_seq is None and until_time is None:
            targets = {s: at_live.get(s, 0) for s in targets}  # the same point as the live schema
        if until_seq is not None:
            targets[subjects.EVENTS_STREAM] = min(until_seq, targets[subjects.EVENTS_STREAM])
        if until_requests_seq is not None:
            targets[subjects.REQUESTS_STREAM] = min(until_requests_seq, targets[subjects.REQUESTS_STREAM])
        until_ns = None if until_time is None else int(until_time.timestamp() * 1e9)
        await migrate(conn, schema)
        writer = Writer(conn, schema, await Catalog.load(conn, schema), notify=False)
        expected: dict[str, int] = {}
        bar = Progress(sum(targets.values()), f"replay -> {schema}", progress)
        try:
            expected, events_ns = await _apply_stream(
                writer,
                subjects.EVENTS_STREAM,
                targets[subjects.EVENTS_STREAM],
                until_ns,
                expected,
                nats_urls,
                bar,
                batch,
            )
            requests_ns = until_ns
            if until_seq is not None and until_requests_seq is None and until_time is None:
                requests_ns = events_ns or 0  # as of the stored time of event `until_seq`
            expected, _ = await _apply_stream(
                writer,
                subjects.REQUESTS_STREAM,
                targets[subjects.REQUESTS_STREAM],
                requests_ns,
                expected,
                nats_urls,
                bar,
                batch,
            )
        finally:
            bar.close()
        await conn.execute("RESET synchronous_commit")  # durable again (this flushes the replay's WAL too)
        # a second connection shares out the digests' hashing (PostgreSQL runs one core per query)
        helper = await psycopg.AsyncConnection.connect(database_url, autocommit=True, prepare_threshold=None)
        async with helper:
            tables = await digest.table_digests(conn, schema, [helper])
            result = Replayed(
                schema,
                expected,
                digest.combine(tables),
                tables,
                sum(expected.values()),
                time.perf_counter() - started,
            )
            live_tables = await digest.table_digests(conn, live, [helper]) if verify else {}
        if verify:
            result.live_digest = digest.combine(live_tables)
            for table in sorted(set(tables) | set(live_tables)):
                if tables.get(table) != live_tables.get(table):
                    if table in tables and table in live_tables:
                        result.differences += await digest.row_differences(conn, live, schema, table)
                    else:
                        result.differences.append(f"{table}: table present on one side only")
        if swap:
            result.swapped_out = await swap_in(conn, schema, live)
        return result
    finally:
        await conn.close()


async def swap_in(conn: Conn, schema: str, live: str = LIVE_SCHEMA) -> str | None:
    """Make `schema` the live one in one transaction; returns the old live schema's new name.

    The exclusive lock on the live checkpoints waits for a running projector's batch to commit;
    that projector then finds the checkpoint moved and resumes from the swapped-in schema's.
    """
    old = f"{live}_old_{time.strftime('%Y%m%d%H%M%S')}_{uuid.uuid4().hex[:4]}"
    async with conn.transaction():
        cur = await conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (live,))
        exists = await cur.fetchone() is not None
        if exists:
            await conn.execute(
                sql.SQL("LOCK TABLE {}.checkpoints IN ACCESS EXCLUSIVE MODE").format(sql.Identifier(live))
            )
            await conn.execute(
                sql.SQL("ALTER SCHEMA {} RENAME TO {}").format(sql.Identifier(live), sql.Identifier(old))
            )
        await conn.execute(
            sql.SQL("ALTER SCHEMA {} RENAME TO {}").format(sql.Identifier(schema), sql.Identifier(live))
        )
    return old if exists else None
