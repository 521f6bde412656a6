"""One route as it is served and as the OpenAPI document describes it, declared once
(`gateway.app`), so that the two cannot drift."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

Handler = Callable[[Request], Awaitable[Response]]
JSON = "application/json"


@dataclass(frozen=True)
class Operation:
    method: str
    path: str
    summary: str
    handler: Handler
    operation_id: str = ""  # the handler's name when not given
    tag: str = ""
    security: Literal["client", "operator", ""] = ""  # which bearer key; "" for none
    # Types (msgspec) of the request body and the success response; a tuple is "one of them".
    body: Any = None
    body_media_type: str = JSON
    query: Any = None  # a Struct of its query parameters (gateway.http.query)
    response: Any = None
    response_media_type: str = JSON
    status: int = 200

    def route(self) -> Route:
        return Route(self.path, self.handler, methods=[self.method])

    @property
    def name(self) -> str:
        return self.operation_id or self.handler.__name__
