"""One admin endpoint: operator authentication, a typed body, a handler, one error shape.

Endpoints are declared once (`Endpoint`) so the routes and the OpenAPI document cannot drift.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Annotated, Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from gateway.http.body import convert, decode_json, read_limited
from gateway.http.edge import Edge
from gateway.http.operation import Operation
from gateway.http.query import decode_query
from gateway.http.responses import error_response, json_response
from gateway.http.stamps import request_id_of
from streams import text
from streams.codes import ServingError
from streams.envelope import Actor, ActorKind

PREFIX = "/admin/v1"
MAX_ADMIN_BODY = 1 << 20
# Who, for the events' actor, when the shared operator token authenticates: a self-declared name
# (actions default it to "admin", a production approval requires it as approved_by). A named
# operator's key (gateway.operators) says who instead, and this header is not read.
OPERATOR_HEADER = "x-mf-operator"


@dataclass(frozen=True)
class Call:
    edge: Edge
    actor: Actor
    path: dict[str, str]
    query: Any  # the endpoint's query Struct, decoded (None when it declares none)
    body: Any
    headers: dict[str, str] = field(default_factory=dict)  # added to the response by the handler
    operator: str = ""  # the operator the request named in OPERATOR_HEADER ("" when it named none)


Handler = Callable[[Call], Awaitable[object]]
# Most admin answers are views built as dicts: described as an object, or a list of them.
OBJECT = dict[str, Any]
ROWS = list[dict[str, Any]]
MAX_LIMIT = 1000  # rows a history read gives at most


Limit = Annotated[int, msgspec.Meta(ge=1, le=MAX_LIMIT, description="Rows at most, newest first")]


class Page(msgspec.Struct, frozen=True):
    """The query of a history read."""

    limit: Limit = 100


@dataclass(frozen=True)
class Endpoint:
    method: str
    path: str  # under PREFIX
    summary: str
    handler: Handler
    body: type | None = None
    tag: str = ""
    status: int = 200
    response: Any = OBJECT  # the answer's type, for the OpenAPI document
    query: type | None = None  # its query parameters (gateway.http.query), served and documented

    def operation(self) -> Operation:
        return Operation(
            self.method,
            PREFIX + self.path,
            self.summary,
            _asgi(self),
            operation_id=self.handler.__name__,
            tag=self.tag,
            security="operator",
            body=self.body,
            query=self.query,
            response=self.response,
            status=self.status,
        )


def declared_operator(request: Request) -> str:
    """The operator named in OPERATOR_HEADER, in the characters an actor id may hold ("" if none)."""
    name = request.headers.get(OPERATOR_HEADER, "").strip()
    return "".join(ch for ch in name if ch.isalnum() or ch in "-_.@")[:64]


def authenticate(edge: Edge, request: Request) -> tuple[Actor, str]:
    """The actor, and the operator's name ("" when the shared token names none): a named
    operator's key says who it is; the shared token takes the name the request declares."""
    header = request.headers.get("authorization", "")
    scheme, _, secret = header.partition(" ")
    if scheme.lower() == "bearer" and secret:
        named = edge.operators.identify(secret)
        if named is not None:
            return Actor(ActorKind.OPERATOR, named), named
        token = edge.operator_token
        if token and hmac.compare_digest(secret.encode(), token.encode()):
            declared = declared_operator(request)
            return Actor(ActorKind.OPERATOR, declared or "admin"), declared
    raise ServingError(
        "CAPABILITY_NOT_AUTHORIZED",
        "the admin API needs `Authorization: Bearer <operator key>`: a named operator's key "
        "(`modelforge operators add`) or MODELFORGE_OPERATOR_TOKEN",
        http_status=401,
    )


def _asgi(endpoint: Endpoint) -> Callable[[Request], Awaitable[Response]]:
    async def handle(request: Request) -> Response:
        edge: Edge = request.app.state.edge
        request_id = request_id_of(request)
        try:
            actor, operator = authenticate(edge, request)
            # Path parameters and every string of the body pass the text rule (streams.text)
            # before any handler runs: what an event records, the read model must be able to store.
            path = {name: text.check(name, value) for name, value in request.path_params.items()}
            body: Any = None
            if endpoint.body is not None:
                raw = await read_limited(request, MAX_ADMIN_BODY)
                body = text.checked(convert(decode_json(raw) if raw else {}, endpoint.body, "request body"))
            query = None if endpoint.query is None else decode_query(request.query_params, endpoint.query)
            call = Call(edge, actor, path, query, body, operator=operator)
            result = await endpoint.handler(call)
        except ServingError as error:
            return error_response(error, request_id)
        return json_response(msgspec.to_builtins(result), endpoint.status, call.headers)

    return handle
