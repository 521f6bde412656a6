"""Writing a prepared batch (see `projections.batch`) into one schema: one transaction for rows,
audit log and checkpoints.

The checkpoint rows are locked first and must match what the caller last applied (else
`CheckpointMoved`: someone else wrote, or a replay was swapped in); they advance in the same
transaction, and `pg_notify` tells waiters the new sequence when it commits; so does the record of
a stretch of MF_REQUESTS that aged out unread (`projections.gaps`). A refused row halts
the projection at its event; a lost session is raised as it is, for the caller to reconnect.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any, NamedTuple

import psycopg
from psycopg import sql
from psycopg.pq import TransactionStatus

from projections import gaps, halts
from projections.audit import AUDIT_COLUMNS
from projections.batch import Catalog, Prepared, Preparer, ProjectionHalted
from projections.facts import Fact
from projections.reconnect import refused_data

Conn = psycopg.AsyncConnection[Any]
NOTIFY_CHANNEL = "modelforge_projection"


class CheckpointMoved(Exception):
    """The stored checkpoint is not what this writer last applied: resume from the stored one."""


class Writer:
    """`prepare` (no I/O, see `Preparer`) and `commit` (one transaction) are split so callers can
    overlap the two."""

    def __init__(self, conn: Conn, schema: str, catalog: Catalog, notify: bool = True) -> None:
        self.conn, self.schema, self.catalog, self.notify = conn, schema, catalog, notify
        self.prepare = Preparer(schema, catalog).prepare
        self._statements = _Statements.render(schema)
        self.halted: dict[str, int] = {}  # stream -> the sequence a projector of it halted at

    async def read_checkpoints(self, streams: Sequence[str]) -> dict[str, int]:
        """The stored checkpoints of `streams` (the ones this writer applies; others are not its own)."""
        cur = await self.conn.execute(
            sql.SQL("SELECT stream, last_seq FROM {}.checkpoints WHERE stream = ANY(%s)").format(
                sql.Identifier(self.schema)
            ),
            (list(streams),),
        )
        rows = await cur.fetchall()
        stopped = await halts.halted(self.conn, self.schema)
        await self.conn.commit()
        self.halted = {stream: seq for stream, seq in stopped.items() if stream in streams}
        return {stream: seq for stream, seq in rows}

    async def write(self, facts: Sequence[Fact], expected: dict[str, int]) -> dict[str, int]:
        """Apply `facts` (in stream order) atomically; returns the new checkpoints."""
        return await self.commit(self.prepare(facts, expected), expected)

    async def commit(self, batch: Prepared, expected: dict[str, int]) -> dict[str, int]:
        """Apply a prepared batch atomically (then raise its halt, if any); returns the new checkpoints."""
        try:
            done = await self._transaction(batch, expected)
        except psycopg.Error as exc:
            if not refused_data(exc):
                raise  # the session, not an event (see projections.reconnect): nothing of it committed
            # The database refused some row: find the event, one transaction each, so the error
            # names it and everything before it is applied (and nothing after it).
            done = dict(expected)
            for fact in batch.facts:
                try:
                    done = await self._transaction(self.prepare([fact], done), done)
                except psycopg.Error as exc:
                    if not refused_data(exc):
                        raise
                    raise ProjectionHalted(
                        fact.stream,
                        fact.seq,
                        fact.headers.get("Mf-Event-Type", "?"),
                        f"{type(exc).__name__}: {exc}".strip(),
                    ) from exc
        if batch.halt is not None:
            raise batch.halt
        return done

    async def _transaction(self, batch: Prepared, expected: dict[str, int]) -> dict[str, int]:
        statements = self._statements
        new = dict(expected)
        new.update(batch.positions)
        conn = self.conn
        # Rare: only the first commit past an event a projector halted at.
        resumed = [stream for stream, seq in self.halted.items() if new.get(stream, 0) >= seq]
        # BEGIN, the checkpoint lock, the rows and the checkpoints go as one query string, bound
        # here (a client cursor): one send and one wait. A pipeline needs an event-loop turn per
        # statement and `conn.transaction()` a round trip for BEGIN (the session is in autocommit);
        # a trickle's transactions are mostly those waits (bench/trickle.py). The audit COPY
        # (which cannot share a query) and COMMIT follow once the checkpoints are checked; a moved
        # one rolls it all back.
        query = [b"BEGIN", statements.lock_checkpoints]
        params: list[Any] = [list(new)]
        for statement, arrays in batch.upserts:
            query.append(statement)
            params.extend(arrays)
        for stream, seq in new.items():
            if seq != expected.get(stream, 0):
                query.append(statements.save_checkpoint)
                params.extend((stream, seq, NOTIFY_CHANNEL, f"{self.schema}:{stream}:{seq}", self.notify))
        try:
            cur = await psycopg.AsyncClientCursor(conn).execute(b"; ".join(query), params)
            cur.nextset()  # past BEGIN's result, to the lock's
            stored = {stream: seq for stream, seq in await cur.fetchall()}
            for stream in new:
                if stored.get(stream, 0) != expected.get(stream, 0):
                    raise CheckpointMoved(
                        f"{stream}: stored {stored.get(stream, 0)}, expected {expected.get(stream, 0)}"
                    )
            # Rare (an aged stretch skipped, the first commit past a halt): a round trip each is fine.
            await gaps.record(conn, self.schema, batch.gaps)
            if resumed:
                await halts.clear(conn, self.schema, resumed)
            if batch.copy_text:
                async with conn.cursor().copy(statements.copy_audit) as copy:
                    await copy.write(batch.copy_text)
            await conn.execute(b"COMMIT")
        except BaseException:
            await _roll_back(conn)
            raise
        for stream in resumed:
            del self.halted[stream]
        gaps.warn(self.schema, batch.gaps)
        return new


async def _roll_back(conn: Conn) -> None:
    """End a failed transaction, if one is open; a lost session (the cause, then) is left as it is,
    for the caller to see the first error rather than this one."""
    if conn.info.transaction_status in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
        with contextlib.suppress(psycopg.Error):
            await conn.execute(b"ROLLBACK")


class _Statements(NamedTuple):
    """A writer's fixed statements, rendered once (composing them per transaction showed in a
    trickle's profile)."""

    lock_checkpoints: bytes
    copy_audit: bytes
    save_checkpoint: bytes

    @classmethod
    def render(cls, schema_name: str) -> _Statements:
        schema = sql.Identifier(schema_name)
        return cls(
            sql.SQL("SELECT stream, last_seq FROM {}.checkpoints WHERE stream = ANY(%s) FOR UPDATE")
            .format(schema)
            .as_bytes(None),
            sql.SQL("COPY {}.audit_log ({}) FROM STDIN")
            .format(schema, sql.SQL(", ").join(map(sql.Identifier, AUDIT_COLUMNS)))
            .as_bytes(None),
            # One round trip for the checkpoint and its notification: a trickle's transactions are
            # mostly round trips (bench/trickle.py).
            sql.SQL(
                "WITH saved AS (INSERT INTO {}.checkpoints (stream, last_seq, projected_at)"
                " VALUES (%s, %s, now()) ON CONFLICT (stream) DO UPDATE"
                " SET last_seq = EXCLUDED.last_seq, projected_at = now() RETURNING last_seq)"
                " SELECT pg_notify(%s, %s) FROM saved WHERE %s"
            )
            .format(schema)
            .as_bytes(None),
        )
