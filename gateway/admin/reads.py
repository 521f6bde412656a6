"""Admin reads from the PostgreSQL read model (tables of projections/migrations), with
read-your-writes: a read first waits until the projector has applied everything the log held when
it came, the caller's last append included (at most 5 s; a read answered without it carries
`x-read-model-stale: true`).

Without DATABASE_URL the request history is folded from MF_REQUESTS instead (the same facts,
read from the log), so the admin API works on a stack without a projector.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

import msgspec
import nats.errors
from nats.aio.client import Client

from eventstore import reading
from gateway.read_models import ReadModel
from streams import subjects
from streams.events import requests as r

if TYPE_CHECKING:
    from gateway.admin.endpoint import Call

log = logging.getLogger("modelforge.gateway.admin.reads")
# the longest a read waits for this replica's request records to be acknowledged (milliseconds as a
# rule; this long only while NATS does not take them)
RECORDS_WAIT_S = 2.0
STALE_HEADER = "x-read-model-stale"  # on a read answered before the projector applied the caller's last write
STALE_REASON_HEADER = "x-read-model-stale-reason"  # why: the projection halted, or is behind


async def written_here(call: Call) -> None:
    """This replica's request records in the stream: those its connection holds for a moment are
    written, and those begun so far acknowledged (up to RECORDS_WAIT_S), before a read of them."""
    await call.edge.ctx.records_written(RECORDS_WAIT_S)


async def fresh_for(model: ReadModel, call: Call) -> None:
    """Read-your-writes for an admin read, fleet-wide: wait until what both projected streams held
    when the read came (every gateway's appends and requests, this one's among them) is applied.
    The projector commits at once for a reader that waits, so however long its interval at a
    trickle (up to a minute, `projections.pace`), a read never shows an older state than the log's,
    whichever gateway wrote it. Where NATS cannot say its streams' ends, this gateway's own last
    append and request event are waited for. A response read without them, or while the projection
    is halted, says so and why (STALE_HEADER, STALE_REASON_HEADER)."""
    store = call.edge.ctx.store
    await written_here(call)
    events_seq, requests_seq = store.last_sequence, store.last_request_sequence
    js = call.edge.ctx.client.jetstream()
    try:
        events, requests = await asyncio.gather(
            js.stream_info(subjects.EVENTS_STREAM), js.stream_info(subjects.REQUESTS_STREAM)
        )
    except (nats.errors.Error, TimeoutError) as exc:
        log.warning("admin read: the streams' ends are unknown (%s): waiting for this gateway's own", exc)
    else:
        events_seq = max(events_seq, events.state.last_seq)
        requests_seq = max(requests_seq, requests.state.last_seq)
    reason = await model.stale_because(events_seq, requests_seq)
    if reason is not None:
        call.headers[STALE_HEADER] = "true"
        call.headers[STALE_REASON_HEADER] = reason


REQUESTS_SQL = """
SELECT request_id, client_id, capability, status, deployment_id, node_id, accelerator_id, cold, code,
       http_status, items, usage_input_tokens, validation_ms, resolution_ms, scheduling_ms, load_ms, queue_ms,
       payload_ms, dispatch_ms, worker_preprocess_ms, worker_inference_ms, worker_serialize_ms, transport_ms,
       gateway_ms, total_ms, accepted_at, finished_at, trace_id
FROM requests WHERE (%s::text IS NULL OR client_id = %s) ORDER BY accepted_at DESC NULLS LAST LIMIT %s
"""

# A project's clients are those whose project it is now (`clients.project_id`: set by the client's
# creation with a project and by a later binding alike, the later one winning).
INTEGRATIONS_SQL = """
SELECT p.project_id, p.name AS project, c.client_id, c.name AS client, l.capability,
       coalesce(l.requests, 0) AS requests, coalesce(l.errors, 0) AS errors, l.p50_ms, l.p95_ms,
       coalesce(u.reserved_bytes, 0) AS reserved_bytes, coalesce(u.leases, 0) AS leases
FROM projects p
JOIN clients c ON c.project_id = p.project_id
LEFT JOIN request_latency l ON l.client_id = c.client_id
LEFT JOIN (SELECT client_id, sum(reserved_bytes)::bigint AS reserved_bytes, count(*) AS leases
           FROM leases GROUP BY client_id) u ON u.client_id = c.client_id
ORDER BY p.project_id, c.client_id
"""

PLACEMENTS_SQL = """
SELECT seq, accelerator_id, request_id, deployment_id, verdict, reason_codes, decision_fingerprint,
       lease_id, eviction_id, required_bytes, schedulable_bytes, decisions, first_at, window_s, dry_run,
       decided_at
FROM placements ORDER BY seq DESC LIMIT %s
"""

METRICS_SQL = """
SELECT
  (SELECT count(*) FROM placements WHERE verdict LIKE 'ADMIT%%' AND NOT dry_run) AS admissions,
  (SELECT coalesce(sum(decisions), 0)::bigint FROM placements WHERE verdict LIKE 'REJECT%%' AND NOT dry_run)
    AS rejections,
  (SELECT coalesce(sum(decisions), 0)::bigint FROM placements WHERE verdict = 'QUEUE' AND NOT dry_run)
    AS queued,
  (SELECT count(*) FROM evictions) AS evictions,
  (SELECT coalesce(sum(load_count), 0) FROM residencies) AS cold_loads,
  (SELECT count(*) FROM requests WHERE status = 'completed' AND NOT cold) AS warm_hits,
  (SELECT count(*) FROM residencies WHERE failure_code = 'GPU_MEMORY_NOT_RECLAIMED') AS reclaim_failures
"""


def _row(event: r.RequestCompleted | r.RequestFailed | r.RequestRejected) -> dict[str, Any]:
    row: dict[str, Any] = msgspec.to_builtins(event)
    row["status"] = {
        r.RequestCompleted: "completed",
        r.RequestFailed: "failed",
        r.RequestRejected: "rejected",
    }[type(event)]
    return row


async def requests_from_log(client: Client, limit: int, client_id: str | None) -> list[dict[str, Any]]:
    """Finished requests, newest first, folded from MF_REQUESTS (no content: hashes and timings)."""
    records = await reading.read_subject_range(
        client, subjects.REQUESTS_STREAM, f"{subjects.REQUESTS_PREFIX}.>"
    )
    rows = [
        _row(rec.event)
        for rec in reversed(records)
        if isinstance(rec.event, r.RequestCompleted | r.RequestFailed | r.RequestRejected)
        and (client_id is None or rec.event.client_id == client_id)
    ]
    return rows[:limit]


def percentile(values: list[float], p: float) -> float | None:
    """Nearest rank: index ceil(n × p) − 1 (reference §7)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(0, -(-len(ordered) * p // 1) - 1)
    return ordered[int(rank)]


KEY_USES_SQL = """
SELECT client_id AS id, last_used_at FROM client_usage
UNION ALL SELECT credential_id, last_used_at FROM credential_usage
"""


async def last_uses(call: Call) -> dict[str, Any]:
    """Client id or credential id -> when its key last authenticated a request (within a minute:
    `ClientKeyUsed`); empty without a read model (DATABASE_URL)."""
    model = call.edge.read_models.get()
    if model is None:
        return {}
    await fresh_for(model, call)
    return {row["id"]: row["last_used_at"] for row in await model.query(KEY_USES_SQL)}
