"""Where a stream's projection halted, kept where the gateway reads it.

A projector that halts (an event it cannot apply, see `projections.batch.ProjectionHalted`) exits
with status 2; its log names the event, but nothing a gateway reads would. So it first records the
halt, in its own transaction: a row in `projection_halts` (one per stream) and a notification on
HALT_CHANNEL, `schema:stream:seq`, which read-your-writes waiters (`projections.wait`) follow to
mark reads stale. The commit that applies the event (an upgraded or fixed projector, resumed
there) deletes the row and notifies `schema:stream:0`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import psycopg
from psycopg import sql

from projections import storable
from projections.batch import ProjectionHalted

log = logging.getLogger("modelforge.projector.halts")
HALT_CHANNEL = "modelforge_projection_halt"
Conn = psycopg.AsyncConnection[Any]


async def record(conn: Conn, schema: str, halt: ProjectionHalted) -> None:
    """Record `halt` in its own transaction; a failure to is logged (the halt is raised regardless)."""
    try:
        async with conn.transaction():
            await conn.execute(
                sql.SQL(
                    "INSERT INTO {}.projection_halts (stream, seq, event_type, reason) VALUES (%s, %s, %s, %s)"
                    " ON CONFLICT (stream) DO UPDATE SET seq = EXCLUDED.seq, event_type = EXCLUDED.event_type,"
                    " reason = EXCLUDED.reason, halted_at = now()"
                ).format(sql.Identifier(schema)),
                (halt.stream, halt.seq, storable.plain(halt.event_type), storable.plain(halt.cause)),
            )
            await conn.execute(
                "SELECT pg_notify(%s, %s)", (HALT_CHANNEL, f"{schema}:{halt.stream}:{halt.seq}")
            )
    except psycopg.Error as exc:
        log.error("could not record the halt at %s sequence %d in %s: %s", halt.stream, halt.seq, schema, exc)


async def halted(conn: Conn, schema: str) -> dict[str, int]:
    """The sequence each halted stream stopped at (none before the table exists)."""
    try:
        cur = await conn.execute(
            sql.SQL("SELECT stream, seq FROM {}.projection_halts").format(sql.Identifier(schema))
        )
    except psycopg.errors.UndefinedTable:
        return {}
    return {stream: seq for stream, seq in await cur.fetchall()}


async def clear(conn: Conn, schema: str, streams: Iterable[str]) -> None:
    """Forget the halts of `streams`, whose events are applied now (in the caller's transaction)."""
    for stream in streams:
        await conn.execute(
            sql.SQL("DELETE FROM {}.projection_halts WHERE stream = %s").format(sql.Identifier(schema)),
            (stream,),
        )
        await conn.execute("SELECT pg_notify(%s, %s)", (HALT_CHANNEL, f"{schema}:{stream}:0"))
