"""Operator endpoints: liveness, readiness, Prometheus metrics."""

from __future__ import annotations

import contextlib
import time

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from gateway.http.edge import Edge
from gateway.http.responses import json_response
from gateway.scheduler import account


async def healthz(request: Request) -> Response:
    return json_response({"status": "ok"})


async def readyz(request: Request) -> Response:
    """Ready when caught up. `?applied=N` waits (up to 10 s) until event N is folded into the
    serving state, `?clients_applied=N` until client event N is in the key directory: an operator
    (or a test) can read its own write through this replica. `?peers_queued=N` waits until the
    other replicas' announced lines add up to N requests: this replica counts them in the global
    queue limit."""
    edge: Edge = request.app.state.edge
    live = edge.ctx.live
    wanted = request.query_params.get("applied", "")
    clients_wanted = request.query_params.get("clients_applied", "")
    peers_wanted = request.query_params.get("peers_queued", "")
    if wanted.isdigit():
        await live.wait_applied(int(wanted), timeout=10.0)
    if clients_wanted.isdigit():
        with contextlib.suppress(TimeoutError):
            await edge.directory.wait_until_applied(int(clients_wanted), timeout=10.0)
    checks = {
        "event_state": edge.ready,
        "clients": edge.directory.ready,
        "nats": edge.ctx.client.is_connected,
    }
    if peers_wanted.isdigit():
        board = edge.ctx.board
        checks["peers_queued"] = board is not None and await board.wait_for_peers(int(peers_wanted), 10.0)
    if wanted.isdigit():
        checks["applied"] = live.applied >= int(wanted)
    if clients_wanted.isdigit():
        checks["clients_applied"] = edge.directory.applied_sequence >= int(clients_wanted)
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
        "modelforge_queued_requests_all_gateways": float(edge.ctx.queue_depth()),
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
