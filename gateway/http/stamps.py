"""Every response carries its request id (`x-request-id`) and its server time (`server-timing`,
`x-mf-latency-ms`), whichever route answered it, 404s included.

The gateway names every request itself: the id keys the request's events and its row in the read
model, so a client must not be able to pick one (reuse another's, or send odd bytes). A client's
own id for its logs goes in `x-client-request-id` and is echoed back when it is a plain token
(letters, digits, `._:-`, at most 128 characters), as OpenAI's API does. Handlers read the id with
`request_id_of` and may set the timing headers themselves (a served request's stage breakdown); the
stamp fills in only what they left out.

A handler that fails with no response started still answers in the one error shape
(`INTERNAL_ERROR`, 500, stamped like any other), not with the server's plain-text 500; the failure
is logged without its message (`streams.redaction.fault_summary`).
"""

from __future__ import annotations

import logging
import re
import time

import msgspec
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from streams.codes import ServingError
from streams.envelope import new_id
from streams.redaction import fault_summary

log = logging.getLogger("modelforge.gateway.http")

_PLAIN_TOKEN = re.compile(rb"[A-Za-z0-9._:-]{1,128}")
_REQUEST_ID = b"x-request-id"
_CLIENT_REQUEST_ID = b"x-client-request-id"
_LATENCY = b"x-mf-latency-ms"


def request_id_of(request: Request) -> str:
    request_id: str = request.scope["state"]["request_id"]
    return request_id


def _client_request_id(scope: Scope) -> bytes | None:
    for name, value in scope["headers"]:
        if name == _CLIENT_REQUEST_ID:
            return value if _PLAIN_TOKEN.fullmatch(value) else None
    return None


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
                if _LATENCY not in names:
                    total = f"{(time.perf_counter() - started) * 1000:.3f}"
                    headers += [(b"server-timing", f"total;dur={total}".encode()), (_LATENCY, total.encode())]
                message = {**message, "headers": headers}
            await send(message)

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
