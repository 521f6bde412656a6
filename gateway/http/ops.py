"""Operator endpoints: liveness, readiness, Prometheus metrics (`gateway.serving.metrics`)."""

from __future__ import annotations

import contextlib
from typing import Annotated

import msgspec
from prometheus_client.exposition import choose_encoder
from starlette.requests import Request
from starlette.responses import Response

from gateway.http.edge import Edge
from gateway.http.projection_metrics import scraped
from gateway.http.query import decode_query
from gateway.http.responses import error_response, json_response
from gateway.http.stamps import request_id_of
from streams.codes import ServingError


async def healthz(request: Request) -> Response:
    return json_response({"status": "ok"})


Sequence = Annotated[int, msgspec.Meta(ge=0)]


class Awaited(msgspec.Struct, frozen=True):
    """What a readiness check waits for (up to 10 s each; 0: nothing)."""

    applied: Annotated[Sequence, msgspec.Meta(description="Event sequence folded into the serving state")] = 0
    clients_applied: Annotated[
        Sequence, msgspec.Meta(description="Client event sequence in the key directory")
    ] = 0
    peers_queued: Annotated[
        Sequence, msgspec.Meta(description="Requests the other replicas' lines add up to")
    ] = 0


async def readyz(request: Request) -> Response:
    """Ready when caught up. `?applied=N` waits (up to 10 s) until event N is folded into the
    serving state, `?clients_applied=N` until client event N is in the key directory: an operator
    (or a test) can read its own write through this replica. `?peers_queued=N` waits until the
    other replicas' announced lines add up to N requests: this replica counts them in the global
    queue limit."""
    try:
        awaited = decode_query(request.query_params, Awaited)
    except ServingError as error:
        return error_response(error, request_id_of(request))
    edge: Edge = request.app.state.edge
    live = edge.ctx.live
    wanted, clients_wanted, peers_wanted = awaited.applied, awaited.clients_applied, awaited.peers_queued
    if wanted:
        await live.wait_applied(wanted, timeout=10.0)
    if clients_wanted:
        with contextlib.suppress(TimeoutError):
            await edge.directory.wait_until_applied(clients_wanted, timeout=10.0)
    checks = {
        "event_state": edge.ready,
        "clients": edge.directory.ready,
        "nats": edge.ctx.client.is_connected,
    }
    if peers_wanted:
        board = edge.ctx.board
        checks["peers_queued"] = board is not None and await board.wait_for_peers(peers_wanted, 10.0)
    if wanted:
        checks["applied"] = live.applied >= wanted
    if clients_wanted:
        checks["clients_applied"] = edge.directory.applied_sequence >= clients_wanted
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
