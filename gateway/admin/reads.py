"""Admin reads from the PostgreSQL read model (tables of projections/migrations), with
read-your-writes: a read first waits until the projector has applied the caller's last append
(at most 5 s; a read answered without it carries `x-read-model-stale: true`).

Without DATABASE_URL the request history is folded from MF_REQUESTS instead (the same facts,
read from the log), so the admin API works on a stack without a projector.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import TYPE_CHECKING, Any

import msgspec
import psycopg
from nats.aio.client import Client
from psycopg.rows import dict_row

from eventstore import reading
from projections.migrate import LIVE_SCHEMA
from projections.wait import ProjectionWaiter
from streams import subjects
from streams.codes import ServingError
from streams.events import requests as r

if TYPE_CHECKING:
    from gateway.admin.endpoint import Call

log = logging.getLogger("modelforge.gateway.admin")
STALE_HEADER = "x-read-model-stale"  # on a read answered before the projector applied the caller's last write
STALE_REASON_HEADER = "x-read-model-stale-reason"  # why: the projection halted, or is behind


class ReadModels:
    """One gateway's read models, one per DATABASE_URL its reads have seen (read per call: a test
    may set it late). Each holds a waiting session until `close`, which the gateway's stop calls:
    a session living past its gateway would outlive the database too (and reconnect to it)."""

    def __init__(self) -> None:
        self._models: dict[str, ReadModel] = {}

    def get(self) -> ReadModel | None:
        url = os.environ.get("DATABASE_URL", "")
        if not url:
            return None
        if url not in self._models:
            self._models[url] = ReadModel(url)
        return self._models[url]

    def required(self, what: str) -> ReadModel:
        """The read model, for a read that has no other source: without DATABASE_URL (a stack without a
        projector) it is refused AUTH_BACKEND_UNAVAILABLE, naming `what` needs it."""
        model = self.get()
        if model is None:
            raise ServingError("AUTH_BACKEND_UNAVAILABLE", f"{what} needs the read model (DATABASE_URL)")
        return model

    async def close(self) -> None:
        models = list(self._models.values())
        self._models.clear()
        for model in models:
            await model.close()


class ReadModel:
    def __init__(self, database_url: str, schema: str = LIVE_SCHEMA) -> None:
        self.url, self.schema = database_url, schema
        self.waiter: ProjectionWaiter | None = None
        self._opening = asyncio.Lock()  # concurrent first reads open one waiter, not one each

    async def _waiter(self) -> ProjectionWaiter:
        async with self._opening:
            if self.waiter is None:
                self.waiter = await ProjectionWaiter.open(self.url, self.schema)
            return self.waiter

    async def close(self) -> None:
        async with self._opening:
            if self.waiter is not None:
                await self.waiter.close()
                self.waiter = None

    async def stale_because(self, events_seq: int, requests_seq: int = 0, timeout: float = 5.0) -> str | None:
        """Why a read now would miss these sequences (logged), or None once the projector applied
        them within `timeout`. A halted projection is not waited for: it will not move on its own."""
        waiter = await self._waiter()
        if waiter.halted:
            stream, seq = min(waiter.halted.items())
            return f"projection halted at {stream} sequence {seq} (see GET /admin/v1/projection)"
        for stream, seq in ((subjects.EVENTS_STREAM, events_seq), (subjects.REQUESTS_STREAM, requests_seq)):
            if seq and not await waiter.wait(seq, stream, timeout):
                applied = waiter.applied.get(stream, 0)
                log.warning(
                    "read model has applied %s only through %d, not %d, after %.0f s: answering from it as it is",
                    stream,
                    applied,
                    seq,
                    timeout,
                )
                return f"projection behind: {stream} applied through {applied}, not {seq}"
        return None

    async def fresh_for(self, call: Call) -> None:
        """Read-your-writes for an admin read: wait until this gateway's last append is applied; a
        response read without it, or while the projection is halted, says so and why
        (STALE_HEADER, STALE_REASON_HEADER)."""
        reason = await self.stale_because(call.edge.ctx.store.last_sequence)
        if reason is not None:
            call.headers[STALE_HEADER] = "true"
            call.headers[STALE_REASON_HEADER] = reason

    async def query(self, text: str, params: tuple[object, ...] = ()) -> list[dict[str, Any]]:
        async with await psycopg.AsyncConnection.connect(
            self.url, autocommit=True, row_factory=dict_row
        ) as conn:
            await conn.execute(f'SET search_path TO "{self.schema}"')
            cur = await conn.execute(text.encode(), params)  # fixed statements; values travel as params
            return [dict(row) for row in await cur.fetchall()]


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
  (SELECT count(*) FROM placements WHERE verdict LIKE 'ADMIT%%') AS admissions,
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
