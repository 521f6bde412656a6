"""Every response carries its request id (`x-request-id`) and its server time (`server-timing`,
`x-mf-latency-ms`), whichever route answered it, 404s included.

The id is the client's `x-request-id` when it is a plain token (letters, digits, `._:-`, at most
128 characters), else a new one: it names the request's events, so it must not carry arbitrary
bytes or sizes into them. Handlers read it with `request_id_of` and may set the timing headers
themselves (a served request's stage breakdown); the stamp fills in only what they left out.
"""

from __future__ import annotations

import re
import time

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from streams.envelope import new_id

_CLIENT_ID = re.compile(rb"[A-Za-z0-9._:-]{1,128}")
_REQUEST_ID = b"x-request-id"
_LATENCY = b"x-mf-latency-ms"


def request_id_of(request: Request) -> str:
    request_id: str = request.scope["state"]["request_id"]
    return request_id


def _request_id(scope: Scope) -> str:
    for name, value in scope["headers"]:
        if name == _REQUEST_ID:
            return value.decode() if _CLIENT_ID.fullmatch(value) else new_id()
    return new_id()


class ResponseStamps:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        request_id = _request_id(scope)
        scope.setdefault("state", {})["request_id"] = request_id

        async def stamped(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                names = {name for name, _ in headers}
                if _REQUEST_ID not in names:
                    headers.append((_REQUEST_ID, request_id.encode()))
                if _LATENCY not in names:
                    total = f"{(time.perf_counter() - started) * 1000:.3f}"
                    headers += [(b"server-timing", f"total;dur={total}".encode()), (_LATENCY, total.encode())]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, stamped)
