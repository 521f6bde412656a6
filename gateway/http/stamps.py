"""Every response carries its request id (`x-request-id`) and its server time (`server-timing`,
`x-mf-latency-ms`), whichever route answered it, 404s included.

The gateway names every request itself: the id keys the request's events and its row in the read
model, so a client must not be able to pick one (reuse another's, or send odd bytes). A client's
own id for its logs goes in `x-client-request-id` and is echoed back when it is a plain token
(letters, digits, `._:-`, at most 128 characters), as OpenAI's API does. Handlers read the id with
`request_id_of` and may set the timing headers themselves (a served request's stage breakdown); the
stamp fills in only what they left out.

Each request is also a span of a W3C trace: the caller's (`traceparent`, `tracestate`) or a new
one (also when the caller's is malformed); every response names it in `traceresponse` and its trace
id in `x-trace-id`, the id an operator joins logs, metrics and the request's events on.

A handler that fails with no response started still answers in the one error shape
(`INTERNAL_ERROR`, 500, stamped like any other), not with the server's plain-text 500; the failure
is logged without its message (`streams.redaction.fault_summary`).
"""

from __future__ import annotations

import logging
import re
import time

import msgspec
from opentelemetry import context, trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from streams import tracing
from streams.codes import ServingError
from streams.envelope import new_id
from streams.redaction import fault_summary

log = logging.getLogger("modelforge.gateway.http")

_PLAIN_TOKEN = re.compile(rb"[A-Za-z0-9._:-]{1,128}")
_REQUEST_ID = b"x-request-id"
_CLIENT_REQUEST_ID = b"x-client-request-id"
_LATENCY = b"x-mf-latency-ms"
_TRACE_HEADERS = {b"traceparent": "traceparent", b"tracestate": "tracestate"}


def request_id_of(request: Request) -> str:
    request_id: str = request.scope["state"]["request_id"]
    return request_id


def _client_request_id(scope: Scope) -> bytes | None:
    for name, value in scope["headers"]:
        if name == _CLIENT_REQUEST_ID:
            return value if _PLAIN_TOKEN.fullmatch(value) else None
    return None


def _trace_carrier(scope: Scope) -> dict[str, str]:
    carrier: dict[str, str] = {}
    for name, value in scope["headers"]:
        key = _TRACE_HEADERS.get(name)
        if key is not None:  # repeated tracestate headers are one list (W3C)
            text = value.decode("latin-1")
            carrier[key] = f"{carrier[key]},{text}" if key in carrier else text
    return carrier


def _request_span(scope: Scope, request_id: str) -> trace.Span:
    parent = tracing.extract(_trace_carrier(scope))
    if not tracing.exporting():
        return tracing.untraced_span(parent)
    method, path = str(scope.get("method", "HTTP")), str(scope.get("path", ""))
    # The client API's paths name capabilities and models; others (admin) may name any id: kept out.
    name = f"{method} {path}" if path.startswith(("/v1/", "/v2/")) else method
    return tracing.TRACER.start_span(
        name,
        context=parent,
        kind=SpanKind.SERVER,
        attributes={"modelforge.request_id": request_id, "http.request.method": method},
    )


class ResponseStamps:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        request_id = new_id()
        scope.setdefault("state", {})["request_id"] = request_id
        client_request_id = _client_request_id(scope)
        started_response = False
        span = _request_span(scope, request_id)
        trace_headers = [
            (b"traceresponse", tracing.traceresponse(span).encode()),
            (b"x-trace-id", tracing.trace_id_of(span).encode()),
        ]

        async def stamped(message: Message) -> None:
            nonlocal started_response
            if message["type"] == "http.response.start":
                started_response = True
                headers = list(message.get("headers", ()))
                names = {name for name, _ in headers}
                if _REQUEST_ID not in names:
                    headers.append((_REQUEST_ID, request_id.encode()))
                if client_request_id is not None:
                    headers.append((_CLIENT_REQUEST_ID, client_request_id))
                headers += trace_headers
                if span.is_recording():
                    status = message["status"]
                    span.set_attribute("http.response.status_code", status)
                    if status >= 500:
                        span.set_status(Status(StatusCode.ERROR))
                if _LATENCY not in names:
                    total = f"{(time.perf_counter() - started) * 1000:.3f}"
                    headers += [(b"server-timing", f"total;dur={total}".encode()), (_LATENCY, total.encode())]
                message = {**message, "headers": headers}
            await send(message)

        token = context.attach(trace.set_span_in_context(span))
        try:
            await self.app(scope, receive, stamped)
        except Exception as error:
            if started_response:
                raise  # too late for another answer: the server ends the connection
            log.error("%s %s failed: %s", scope.get("method"), scope.get("path"), fault_summary(error))
            failed = ServingError("INTERNAL_ERROR", f"the gateway failed to answer ({type(error).__name__})")
            body = msgspec.json.encode(failed.to_body(request_id))
            headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
            await stamped({"type": "http.response.start", "status": 500, "headers": headers})
            await stamped({"type": "http.response.body", "body": body})
        finally:
            context.detach(token)
            span.end()
