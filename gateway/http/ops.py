"""Operator endpoints: liveness, readiness, Prometheus metrics."""

from __future__ import annotations

import time

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from gateway.http.edge import Edge
from gateway.http.responses import json_response
from gateway.scheduler import account


async def healthz(request: Request) -> Response:
    return json_response({"status": "ok"})


async def readyz(request: Request) -> Response:
    edge: Edge = request.app.state.edge
    live = edge.ctx.live
    checks = {
        "event_state": edge.ready,
        "clients": edge.directory.ready,
        "nats": edge.ctx.client.is_connected,
    }
    ok = all(checks.values())
    return json_response(
        {"status": "ready" if ok else "not_ready", "checks": checks, "applied_sequence": live.applied},
        200 if ok else 503,
    )


async def metrics(request: Request) -> Response:
    edge: Edge = request.app.state.edge
    live = edge.ctx.live
    now = time.time()
    gauges: dict[str, float] = {
        "modelforge_applied_event_sequence": float(live.applied),
        "modelforge_queued_requests": float(edge.ctx.queued),
        "modelforge_background_writes": float(len(edge.ctx.background)),
    }
    for state in live.schedulable_accelerators(now):
        budget = account(state, live.policy, now)
        label = state.accelerator_id.replace('"', "")
        gauges[f'modelforge_accelerator_schedulable_bytes{{accelerator="{label}"}}'] = float(
            budget.schedulable_bytes
        )
        gauges[f'modelforge_accelerator_resident_bytes{{accelerator="{label}"}}'] = float(
            budget.resident_bytes
        )
        gauges[f'modelforge_accelerator_leased_bytes{{accelerator="{label}"}}'] = float(budget.leased_bytes)
    return PlainTextResponse(edge.metrics.render(gauges), media_type="text/plain; version=0.0.4")
