"""Operator endpoints: liveness, readiness, Prometheus metrics (`gateway.serving.metrics`)."""

from __future__ import annotations

import contextlib

from prometheus_client.exposition import choose_encoder
from starlette.requests import Request
from starlette.responses import Response

from gateway.http.edge import Edge
from gateway.http.projection_metrics import scraped
from gateway.http.responses import json_response


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
    # the text format, or OpenMetrics for a scraper that asks for it (as prometheus_client's own app)
    encode, content_type = choose_encoder(request.headers.get("accept", ""))
    return Response(encode(await scraped(edge)), headers={"content-type": content_type})
