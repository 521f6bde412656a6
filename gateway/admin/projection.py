"""`GET /admin/v1/projection`: how the projection stands, per projected stream (its checkpoint
against the stream's sequences), where a projector halted (`projection_halts`) and the stretches
it never saw (`projection_gaps`).

A read of live state (see gateway.projection_state).
"""

from __future__ import annotations

from gateway.admin.endpoint import Call, Endpoint
from gateway.projection_state import halted_streams, rows, stream_positions

GAPS_SHOWN = 100  # newest first; `gaps_total` counts them all

GAPS_SQL = """
SELECT stream, first_seq, last_seq, last_seq - first_seq + 1 AS count, reason, detected_at,
       count(*) OVER () AS total
FROM projection_gaps ORDER BY detected_at DESC, first_seq DESC LIMIT %s
"""


async def projection_status(call: Call) -> object:
    model = call.edge.read_models.required("the projection status")
    streams = await stream_positions(model, call.edge.ctx.client.jetstream())
    gaps = await rows(model, GAPS_SQL, (GAPS_SHOWN,))
    return {
        "streams": streams,
        "halted": await halted_streams(model),
        "gaps": [{k: v for k, v in gap.items() if k != "total"} for gap in gaps],
        "gaps_total": int(gaps[0]["total"]) if gaps else 0,
    }


ENDPOINTS = [
    Endpoint(
        "GET",
        "/projection",
        "Checkpoints, lag, halts and gaps of the read model",
        projection_status,
        tag="projection",
    ),
]
