"""JSON responses: one error shape, and the stage breakdown as timing headers."""

from __future__ import annotations

from collections.abc import Mapping

import msgspec
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from gateway.http.stamps import request_id_of
from streams.codes import ServingError
from streams.events.requests import LatencyBreakdown

_encoder = msgspec.json.Encoder()


def json_response(body: object, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    """(`x-request-id` and the server time are stamped on every response by `gateway.http.stamps`.)"""
    return Response(_encoder.encode(body), status_code=status, media_type="application/json", headers=headers)


def error_response(error: ServingError, request_id: str) -> Response:
    headers = {}
    retry_after = error.details.get("retry_after_s")
    if error.http_status in (429, 503) and retry_after is not None:
        headers["retry-after"] = str(max(1, int(float(str(retry_after)) + 0.999)))
    elif error.http_status == 429:
        headers["retry-after"] = "1"
    if error.http_status == 401:
        headers["www-authenticate"] = 'Bearer realm="modelforge"'  # RFC 6750: how to authenticate
    if error.http_status == 408:
        headers["connection"] = "close"  # the rest of the body may still come: the connection is done
    return json_response(error.to_body(request_id), error.http_status, headers)


async def routing_error(request: Request, exc: Exception) -> Response:
    """Starlette's own refusals (no such route, wrong method) in the one error shape."""
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    if status == 405:
        refusal = ServingError("METHOD_NOT_ALLOWED", f"{request.url.path} does not take {request.method}")
    elif status == 404:
        refusal = ServingError(
            "ROUTE_NOT_FOUND",
            f"no route {request.url.path}; clients call POST /v1/embeddings, /v1/rerank, "
            "/v1/ocr, /v1/audio/transcriptions, /v1/capabilities/{capability}:invoke and GET /v1/models; "
            "operators use /console; every route is described at /openapi.json (browsable at /docs)",
        )
    else:
        refusal = ServingError(
            "INVALID_INPUT", str(getattr(exc, "detail", "bad request")), http_status=status
        )
    response = json_response(refusal.to_body(request_id_of(request)), refusal.http_status)
    if isinstance(exc, HTTPException) and exc.headers:
        response.headers.update(exc.headers)  # 405's `allow`
    return response


def timing_headers(latency: LatencyBreakdown) -> dict[str, str]:
    """`Server-Timing` (what browsers and proxies understand) plus the total on its own."""
    parts = [
        f"{name.removesuffix('_ms')};dur={value:.3f}"
        for name, value in msgspec.structs.asdict(latency).items()
        if value
    ]
    return {"server-timing": ", ".join(parts), "x-mf-latency-ms": f"{latency.total_ms:.3f}"}


def latency_body(latency: LatencyBreakdown) -> dict[str, float]:
    return {k: round(v, 3) for k, v in msgspec.structs.asdict(latency).items()}
