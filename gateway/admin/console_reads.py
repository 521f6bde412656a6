"""The admin reads the operator console draws: request traffic per capability over time, the
deployments with their copies and health, and recent evictions. Each is an ordinary typed admin
read (in the OpenAPI document), usable by any script as well as by the page."""

from __future__ import annotations

import time
from typing import Annotated, Any

import msgspec
from nats.aio.client import Client

from eventstore import reading
from gateway.admin.endpoint import ROWS, Call, Endpoint, Limit
from gateway.admin.glance import Finished, FleetDeployment, Traffic, fleet, traffic
from gateway.admin.reads import fresh_for, written_here
from streams import subjects
from streams.codes import ServingError
from streams.events import requests as r

MAX_WINDOW_S = 7 * 24 * 3600
MAX_BUCKETS = 720  # points per series: enough for a chart, small enough to draw every 5 s

FINISHED_SQL = """
SELECT capability, status, total_ms, extract(epoch FROM finished_at)::float8 AS at
FROM requests WHERE finished_at >= to_timestamp(%s) AND status IN ('completed', 'failed', 'rejected')
"""

EVICTIONS_SQL = """
SELECT eviction_id, accelerator_id, victims, for_deployment_id, required_bytes, state, reclaimed_bytes,
       planned_at, completed_at
FROM evictions ORDER BY planned_at DESC NULLS LAST, eviction_id LIMIT %s
"""


class Window(msgspec.Struct, frozen=True):
    """The query of the traffic read: how far back, in buckets of how many seconds."""

    window_s: Annotated[int, msgspec.Meta(ge=60, le=MAX_WINDOW_S, description="Seconds back from now")] = 3600
    step_s: Annotated[int, msgspec.Meta(ge=1, le=3600, description="Seconds a point covers")] = 60


class EvictionPage(msgspec.Struct, frozen=True):
    limit: Limit = 50


async def _finished_from_log(client: Client, since: float) -> list[Finished]:
    """Finished requests since `since`, folded from MF_REQUESTS (a stack without a read model)."""
    records = await reading.read_subject_range(
        client, subjects.REQUESTS_STREAM, f"{subjects.REQUESTS_PREFIX}.>"
    )
    out = []
    for rec in records:
        event, at = rec.event, rec.envelope.occurred_at.timestamp() if rec.envelope else 0.0
        if at < since:
            continue
        match event:
            case r.RequestCompleted():
                out.append(Finished(event.capability, "completed", event.latency.total_ms, at))
            case r.RequestFailed():
                out.append(Finished(event.capability, "failed", event.latency.total_ms, at))
            case r.RequestRejected():
                out.append(Finished(event.capability, "rejected", None, at))
    return out


async def request_traffic(call: Call) -> Traffic:
    query: Window = call.query
    window_s, step_s = query.window_s, query.step_s
    if window_s / step_s > MAX_BUCKETS:
        raise ServingError(
            "INVALID_INPUT", f"window_s / step_s must be at most {MAX_BUCKETS} points", "step_s"
        )
    until = time.time()
    since = until - window_s - step_s
    model = call.edge.read_models.get()
    if model is None:
        await written_here(call)
        finished = await _finished_from_log(call.edge.ctx.client, since)
    else:
        await fresh_for(model, call)
        rows = await model.query(FINISHED_SQL, (since,))
        finished = [Finished(x["capability"] or "", x["status"], x["total_ms"], x["at"]) for x in rows]
    return traffic(finished, until, window_s, step_s)


async def deployment_fleet(call: Call) -> list[FleetDeployment]:
    live = call.edge.ctx.live
    return fleet(live.catalog.deployments.values(), live.accelerators.values())


async def evictions(call: Call) -> list[dict[str, Any]]:
    limit = call.query.limit
    model = call.edge.read_models.required("eviction history")
    await fresh_for(model, call)
    return await model.query(EVICTIONS_SQL, (limit,))


ENDPOINTS = [
    Endpoint(
        "GET", "/traffic", "Requests, errors and p50/p95 latency per capability over time", request_traffic,
        tag="operations", response=Traffic, query=Window,
    ),
    Endpoint(
        "GET", "/fleet", "Deployments with their resident copies and health", deployment_fleet,
        tag="operations", response=list[FleetDeployment],
    ),
    Endpoint(
        "GET", "/scheduler/evictions", "Eviction history (read model)", evictions, tag="scheduler", response=ROWS,
        query=EvictionPage,
    ),
]  # fmt: skip
