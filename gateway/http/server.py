"""The HTTP server under the gateway's ASGI app: uvicorn with httptools, whose refusal of bytes that
are not an HTTP/1.1 request (a malformed request line or header, a bad or conflicting
`content-length`, more body than declared) is in the one error shape with a request id and the
server time, as every other answer is, instead of uvicorn's plain-text 400; and whose lost connection
reaches the request it is running even when the client has pipelined another behind it (uvicorn
tells only the newest request, which has not started), so that request stops at once
(`gateway.http.disconnect`) instead of running on for nobody."""

from __future__ import annotations

import time
from typing import Any

import msgspec
import uvicorn
from uvicorn._types import ASGI3Application
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol, RequestResponseCycle

from streams.codes import ServingError
from streams.envelope import new_id


class GatewayHttpProtocol(HttpToolsProtocol):
    _received_at = 0.0
    _running: RequestResponseCycle | None = None  # the request being served on this connection

    def data_received(self, data: bytes) -> None:
        self._received_at = time.perf_counter()
        super().data_received(data)

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: ASGI3Application) -> None:
        self._running = cycle
        super()._start_asgi_task(cycle, app)

    def connection_lost(self, exc: Exception | None) -> None:
        running = self._running
        if running is not None and running is not self.cycle and not running.response_complete:
            running.disconnected = True  # a request pipelined behind it became `self.cycle`
            running.message_event.set()
        super().connection_lost(exc)

    def send_400_response(self, msg: str) -> None:
        request_id = new_id()
        refusal = ServingError(
            "INVALID_INPUT",
            "the request is not valid HTTP/1.1 (its request line, a header, or its body's framing: "
            "content-length and transfer-encoding)",
            http_status=400,
        )
        body = msgspec.json.encode(refusal.to_body(request_id))
        total = f"{(time.perf_counter() - self._received_at) * 1000:.3f}".encode()
        content = [STATUS_LINE[400]]
        for name, value in self.server_state.default_headers:
            content.extend([name, b": ", value, b"\r\n"])
        for name, value in (
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
            (b"x-request-id", request_id.encode()),
            (b"server-timing", b"total;dur=" + total),
            (b"x-mf-latency-ms", total),
        ):
            content.extend([name, b": ", value, b"\r\n"])
        content.extend([b"\r\n", body])
        self.transport.write(b"".join(content))
        self.transport.close()


def server_config(app: Any, **options: Any) -> uvicorn.Config:
    """The gateway's uvicorn settings (no access log: request lines are the operator's proxy's to
    log), with `options` (host, port, log level) added."""
    return uvicorn.Config(app, http=GatewayHttpProtocol, access_log=False, **options)
