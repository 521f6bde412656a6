"""How far the read model has projected each stream: its checkpoint against the stream's
sequences, and where a projector halted. Read by the admin API (`GET /admin/v1/projection`) and
by `/metrics` (the projection's lag gauges).

A read of live state: no read-your-writes wait. The checkpoints are read before the streams, so a
lag is never made negative by a message published in between; a negative lag means the read
model was built from another stream than this one.
"""

from __future__ import annotations

from typing import Any

import psycopg
from nats.js.client import JetStreamContext

from gateway.read_models import ReadModel
from streams import subjects

CHECKPOINTS_SQL = "SELECT stream, last_seq, projected_at FROM checkpoints"
HALTS_SQL = "SELECT stream, seq, event_type, reason, halted_at FROM projection_halts ORDER BY stream"


async def rows(model: ReadModel, text: str, params: tuple[object, ...] = ()) -> list[dict[str, Any]]:
    """Rows of a read-model table; none while the projector has not created it yet."""
    try:
        return await model.query(text, params)
    except psycopg.errors.UndefinedTable:
        return []


async def stream_positions(model: ReadModel, js: JetStreamContext) -> list[dict[str, Any]]:
    """Per projected stream, its checkpoint (and when it last advanced) against its sequences."""
    checkpoints = {row["stream"]: row for row in await rows(model, CHECKPOINTS_SQL)}
    streams = []
    for stream in subjects.PROJECTED_STREAMS:
        state = (await js.stream_info(stream)).state
        applied = checkpoints.get(stream, {})
        checkpoint = int(applied.get("last_seq", 0))
        streams.append(
            {
                "stream": stream,
                "checkpoint": checkpoint,
                "projected_at": applied.get("projected_at"),
                "first_seq": state.first_seq,
                "last_seq": state.last_seq,
                "lag": state.last_seq - checkpoint,
                # Gone from the stream before the projector read them: a gap once it reads on.
                "gone_unread": max(0, state.first_seq - 1 - checkpoint),
            }
        )
    return streams


async def halted_streams(model: ReadModel) -> list[dict[str, Any]]:
    return await rows(model, HALTS_SQL)
