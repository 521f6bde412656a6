"""Read-your-writes: wait until the projection has applied a stream sequence.

The projector `pg_notify`s `schema:stream:seq` when each batch commits. A waiter LISTENs first,
then reads the checkpoint (so no commit can slip between the two), then wakes on notifications
(`projections.wanted.hear`: only when the server sends one): no polling loop and no sleeps. A wait for a sequence not applied yet first asks the projector to
commit it without waiting out its commit interval (`projections.wanted`), on a second session
(the listening one is taken by its notifications). A lost session is opened again the same way. It follows where the
projection halted (`projections.halts`) the same way, so a read can say so without a query.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

from projections import halts
from projections.migrate import LIVE_SCHEMA, check_schema
from projections.reconnect import reconnect
from projections.wanted import ask, hear
from projections.writer import NOTIFY_CHANNEL
from streams import subjects

log = logging.getLogger("modelforge.projections.wait")


class ProjectionWaiter:
    """One listening connection serving any number of concurrent waits.

    A session that ends (database restart, failover, `pg_terminate_backend`) is opened again with a
    bounded back-off (see projections.reconnect): LISTEN, read the checkpoints, wake the waiters, so
    a commit notified while no session listened is still seen."""

    def __init__(self, database_url: str, schema: str) -> None:
        self.url, self.schema = database_url, schema
        self.conn: psycopg.AsyncConnection[Any] | None = None
        self.applied: dict[str, int] = {}
        self.halted: dict[str, int] = {}  # stream -> the sequence its projector halted at
        self._changed = asyncio.Event()  # set (and replaced) at each change: waits look again
        self._closing = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._asking: psycopg.AsyncConnection[Any] | None = None  # opened at the first ask

    @classmethod
    async def open(cls, database_url: str, schema: str = LIVE_SCHEMA) -> ProjectionWaiter:
        waiter = cls(database_url, check_schema(schema))
        waiter.conn = await waiter._listening()
        waiter._task = asyncio.create_task(waiter._listen())
        return waiter

    async def _listening(self) -> psycopg.AsyncConnection[Any]:
        """A new session that LISTENs, then reads the checkpoints and halts (so no commit slips between)."""
        conn = await psycopg.AsyncConnection.connect(self.url, autocommit=True)
        conn.add_notify_handler(self._heard)  # first: a commit notified during the reads below counts
        try:
            for channel in (NOTIFY_CHANNEL, halts.HALT_CHANNEL):
                await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
            try:
                cur = await conn.execute(
                    sql.SQL("SELECT stream, last_seq FROM {}.checkpoints").format(sql.Identifier(self.schema))
                )
                applied = {stream: seq for stream, seq in await cur.fetchall()}
            except psycopg.errors.UndefinedTable:
                applied = {}  # not migrated yet: nothing applied
            self.halted = await halts.halted(conn, self.schema)
        except BaseException:
            await conn.close()
            raise
        self._advance(applied)
        return conn

    def _change(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def _advance(self, applied: dict[str, int]) -> None:
        for stream, seq in applied.items():
            self.applied[stream] = max(self.applied.get(stream, 0), seq)
        self._change()

    def _heard(self, note: psycopg.Notify) -> None:
        schema, _, rest = note.payload.partition(":")
        stream, _, seq = rest.rpartition(":")
        if schema != self.schema or not seq.isdigit():
            return
        if note.channel == halts.HALT_CHANNEL:
            self._halt(stream, int(seq))
        else:
            self._advance({stream: int(seq)})

    async def _listen(self) -> None:
        while self.conn is not None:
            try:
                await hear(self.conn)
            except psycopg.Error as exc:
                log.warning("read-your-writes waiter lost its database session (%s)", exc)
            await self.conn.close()
            self.conn = await reconnect(self._listening, "read-your-writes waiter", self._closing)

    def _halt(self, stream: str, seq: int) -> None:
        if seq:
            self.halted[stream] = seq
        else:
            self.halted.pop(stream, None)  # resumed: the commit that applied the event cleared it
        self._change()

    async def wait(self, sequence: int, stream: str = subjects.EVENTS_STREAM, timeout: float = 5.0) -> bool:
        """True once `stream` is applied through `sequence`; False after `timeout` seconds."""
        if self.applied.get(stream, 0) < sequence:
            await self._ask(stream, sequence)
        try:
            async with asyncio.timeout(timeout):
                await self.until(lambda: self.applied.get(stream, 0) >= sequence)
        except TimeoutError:
            return False
        return True

    async def until(self, done: Callable[[], bool]) -> None:
        """Return once `done()` holds (of `applied`, `halted`), looking again at each change heard."""
        while not done():
            await self._changed.wait()

    async def _ask(self, stream: str, sequence: int) -> None:
        """Ask the projector for `sequence` now; a failed ask only leaves the wait to take longer."""
        try:
            if self._asking is None:
                self._asking = await psycopg.AsyncConnection.connect(self.url, autocommit=True)
            await ask(self._asking, self.schema, stream, sequence)
        except psycopg.Error as exc:
            log.info(
                "could not ask the projector for %s %d (%s): waiting for its interval", stream, sequence, exc
            )
            if self._asking is not None:
                await self._asking.close()
                self._asking = None

    async def close(self) -> None:
        self._closing.set()
        if self._asking is not None:
            await self._asking.close()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, psycopg.Error):
                await self._task
        if self.conn is not None:
            await self.conn.close()


async def wait_for_sequence(
    database_url: str,
    sequence: int,
    stream: str = subjects.EVENTS_STREAM,
    schema: str = LIVE_SCHEMA,
    timeout: float = 5.0,
) -> bool:
    waiter = await ProjectionWaiter.open(database_url, schema)
    try:
        return await waiter.wait(sequence, stream, timeout)
    finally:
        await waiter.close()
