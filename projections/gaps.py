"""Stretches of a stream the projection never saw.

MF_REQUESTS is bounded by age (streams/configs.py): a projector down, or behind, for longer than
that finds the messages after its checkpoint gone, and the stream hands it the first one left. The
stretch is recorded, not skipped in silence: a row in `projection_gaps`, committed with the
checkpoint that moves past it, and a warning naming it. MF_EVENTS keeps every event and denies
deletes, so a stretch missing there means the stream lost part of the source of truth: the
projection halts before it instead (`projections.batch.plan`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import msgspec
import psycopg
from psycopg import sql

from streams import subjects

log = logging.getLogger("modelforge.projector.gaps")
AGED_STREAMS = frozenset({subjects.REQUESTS_STREAM})  # bounded by age: messages may go unread
AGED_OUT = "aged out of the stream (its max age) before the projector read them"


class Gap(msgspec.Struct, frozen=True, gc=False):
    stream: str
    first_seq: int
    last_seq: int
    reason: str

    def describe(self) -> str:
        return f"{self.stream} sequences {self.first_seq}-{self.last_seq}"


def missing(stream: str, after: int, seq: int) -> Gap | None:
    """The stretch between the last sequence applied (`after`) and the one delivered now, if any."""
    return Gap(stream, after + 1, seq - 1, AGED_OUT) if seq > after + 1 else None


def lost_events(gap: Gap) -> str:
    """Why a projection halts at a stretch missing from a stream that never drops messages."""
    return (
        f"{gap.describe()} are missing, but {gap.stream} never deletes or expires events: the stream"
        " is not the one this read model was built from (check its configuration and restore it);"
        " nothing after the missing stretch is applied"
    )


async def record(conn: psycopg.AsyncConnection[Any], schema: str, gaps: Sequence[Gap]) -> None:
    """Write `gaps` into `schema.projection_gaps` (in the caller's transaction)."""
    statement = sql.SQL(
        "INSERT INTO {}.projection_gaps (stream, first_seq, last_seq, reason) VALUES (%s, %s, %s, %s)"
        " ON CONFLICT (stream, first_seq) DO NOTHING"
    ).format(sql.Identifier(schema))
    for gap in gaps:
        await conn.execute(statement, (gap.stream, gap.first_seq, gap.last_seq, gap.reason))


def warn(schema: str, gaps: Sequence[Gap]) -> None:
    for gap in gaps:
        log.warning(
            "%s: %d message(s) %s; their rows are missing from schema %s (recorded in projection_gaps)",
            gap.describe(),
            gap.last_seq - gap.first_seq + 1,
            gap.reason,
            schema,
        )
