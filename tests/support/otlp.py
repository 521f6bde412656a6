"""A real OTLP/HTTP trace receiver for tests: a starlette app under uvicorn on a free port that
decodes each `ExportTraceServiceRequest` (protobuf, as the SDK's exporter sends it) into `Span`s."""

from __future__ import annotations

import asyncio
import gzip
import socket
from collections.abc import Callable

import msgspec
import uvicorn
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route


class Span(msgspec.Struct, frozen=True):
    service: str
    name: str
    trace_id: str  # 32 hex digits
    span_id: str  # 16 hex digits
    parent_span_id: str  # "" for a root span
    attributes: dict[str, object]


def _spans_of(export: ExportTraceServiceRequest) -> list[Span]:
    found = []
    for resource_spans in export.resource_spans:
        resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                attributes: dict[str, object] = {}
                for a in span.attributes:
                    kind = a.value.WhichOneof("value")
                    attributes[a.key] = getattr(a.value, kind) if kind else None
                found.append(
                    Span(
                        resource.get("service.name", ""),
                        span.name,
                        span.trace_id.hex(),
                        span.span_id.hex(),
                        span.parent_span_id.hex(),
                        attributes,
                    )
                )
    return found


class OtlpReceiver:
    """`POST /v1/traces`; `spans` holds every span received, `wait_until` waits for more."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self._arrived = asyncio.Condition()
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None
        self.url = ""

    async def _export(self, request: Request) -> Response:
        body = await request.body()
        if request.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        export = ExportTraceServiceRequest()
        export.ParseFromString(body)
        async with self._arrived:
            self.spans.extend(_spans_of(export))
            self._arrived.notify_all()
        answer = ExportTraceServiceResponse().SerializeToString()
        return Response(answer, media_type="application/x-protobuf")

    async def wait_until(self, done: Callable[[list[Span]], bool], timeout_s: float = 60) -> list[Span]:
        """The spans received, once `done` holds for them (a bound on a hung test, not a timing)."""
        async with asyncio.timeout(timeout_s), self._arrived:
            await self._arrived.wait_for(lambda: done(self.spans))
            return list(self.spans)

    async def start(self) -> str:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        app = Starlette(routes=[Route("/v1/traces", self._export, methods=["POST"])])
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
        self._task = asyncio.get_running_loop().create_task(self._server.serve(sockets=[sock]))
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        return self.url

    async def stop(self) -> None:
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            await self._task
