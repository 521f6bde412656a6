"""Read-your-writes: wait until the projection has applied a stream sequence.

The projector `pg_notify`s `schema:stream:seq` when each batch commits. A waiter LISTENs first,
then reads the checkpoint (so no commit can slip between the two), then wakes on notifications:
no polling loop and no sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import psycopg
from psycopg import sql

from projections.migrate import LIVE_SCHEMA, check_schema
from projections.writer import NOTIFY_CHANNEL
from streams import subjects


class ProjectionWaiter:
    """One listening connection serving any number of concurrent waits."""

    def __init__(self, conn: psycopg.AsyncConnection[Any], schema: str) -> None:
        self.conn, self.schema = conn, schema
        self.applied: dict[str, int] = {}
        self.changed = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, database_url: str, schema: str = LIVE_SCHEMA) -> ProjectionWaiter:
        conn = await psycopg.AsyncConnection.connect(database_url, autocommit=True)
        waiter = cls(conn, check_schema(schema))
        await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(NOTIFY_CHANNEL)))
        try:
            cur = await conn.execute(
                sql.SQL("SELECT stream, last_seq FROM {}.checkpoints").format(sql.Identifier(schema))
            )
            waiter.applied = {stream: seq for stream, seq in await cur.fetchall()}
        except psycopg.errors.UndefinedTable:
            pass  # not migrated yet: nothing applied
        waiter._task = asyncio.create_task(waiter._listen())
        return waiter

    async def _listen(self) -> None:
        async for note in self.conn.notifies():
            schema, _, rest = note.payload.partition(":")
            stream, _, seq = rest.rpartition(":")
            if schema != self.schema or not seq.isdigit():
                continue
            async with self.changed:
                self.applied[stream] = max(self.applied.get(stream, 0), int(seq))
                self.changed.notify_all()

    async def wait(self, sequence: int, stream: str = subjects.EVENTS_STREAM, timeout: float = 5.0) -> bool:
        """True once `stream` is applied through `sequence`; False after `timeout` seconds."""
        async with self.changed:
            try:
                async with asyncio.timeout(timeout):
                    await self.changed.wait_for(lambda: self.applied.get(stream, 0) >= sequence)
            except TimeoutError:
                return False
        return True

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, psycopg.Error):
                await self._task
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
