"""The shape every capability call takes at the edge, whatever API dialect it arrives in.

authenticate → authorise the capability (its scopes; a project-bound client's project channels) →
read the body within its limit → parse and validate
(the dialect's job) → client limits (alongside the capacity search when the client is far from
them: `gateway.clients.admission`) → serve, stopped if the client disconnects before its model
runs (`gateway.http.disconnect`) → render (the dialect's job). A refusal, by the
checks or the client's limits, is recorded as the request's only event (`RequestRejected`);
later failures are recorded by the pipeline.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias, TypeVar

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from gateway.clients.admission import Admission
from gateway.clients.model import ClientPrincipal
from gateway.deployments.routes import names_of
from gateway.http.body import JsonValue, decode_json, read_limited, too_large
from gateway.http.disconnect import Interruption, while_connected
from gateway.http.edge import Edge
from gateway.http.responses import error_response, json_response, latency_body, timing_headers
from gateway.http.stamps import request_id_of
from gateway.serving.background import record_request
from gateway.serving.dispatch import ENVELOPE_BYTES
from gateway.serving.outputs import JSON_OUTPUT, OutputReader
from gateway.serving.pipeline import serve
from gateway.serving.requests import RequestShape, Served, ServeRequest, internal_error, record_rejection
from streams.codes import ServingError
from streams.contracts import CapabilityContract
from streams.events.requests import ClientKeyUsed
from streams.tracing import span

# The worker's output, as served (as the call's `Prepared.output` reads it: JSON bytes unless the
# dialect names a type), and the request id → the answer in the dialect: a dict (sent as JSON, with
# the request id and latency added), any other JSON value, or a whole `Response`.
Render = Callable[[Any, Served[Any], str], object]


class Prepared(msgspec.Struct, frozen=True):
    """A validated call: the contract input to send, its shape, and how to answer in the dialect."""

    payload: bytes
    shape: RequestShape
    render: Render
    model: str = ""  # an experiment's route, where the dialect names one
    # The status the dialect answers a model's INVALID_INPUT refusal with (OpenAI's audio API: 400),
    # else the code's own (422).
    model_refusal_status: int | None = None
    input_type: str = ""  # an embedding request's "query" | "document", for the model's prefixes
    output: OutputReader[Any] = JSON_OUTPUT  # how the worker's reply is read, for `render`


Route = Callable[[str], str]  # the model name a call naming `model` is served by (Catalog.resolve)
Body = TypeVar("Body")  # a body as decoded: JSON (`JsonValue`), or a multipart form's parts
Parse: TypeAlias = Callable[[Body, CapabilityContract, Route], Prepared]
Decode: TypeAlias = Callable[[bytes], Body]  # the body (read within its limit) → what Parse takes


class ContractChoice(msgspec.Struct, frozen=True):
    """A route that serves more than one contract (`/v1/embeddings`: texts or images): those it
    may call, and the one a decoded body is for. The key must hold that one's scope, and the body
    be within that one's size limit."""

    contracts: tuple[CapabilityContract, ...]
    of_body: Callable[[object], CapabilityContract]  # the decoded body → the contract it is for


def _permitted(
    edge: Edge, principal: ClientPrincipal, contract: CapabilityContract, choice: ContractChoice | None
) -> tuple[CapabilityContract, ...]:
    """The contracts the key may call through the route (its scopes and project bindings): the
    route's own, or with a choice those of its contracts it may call; none of them is the route's
    own contract's refusal (403), before the body is read."""
    if choice is None:
        edge.directory.authorize(principal, contract.capability)
        return (contract,)
    permitted = tuple(
        c
        for c in choice.contracts
        if c.capability in principal.scopes and _may_call(edge, principal, c.capability)
    )
    if not permitted:
        edge.directory.authorize(principal, contract.capability)
    return permitted


def _check_carried(edge: Edge, payload: bytes) -> None:
    """PAYLOAD_TOO_LARGE (413) for an input NATS would not carry to the agent (its max_payload,
    as the server announced it): refused here, before a lease is taken for it, rather than by the
    dispatch after one. A contract's body limit may exceed it (base64 grows a file by a third)."""
    carried = edge.ctx.client.max_payload - ENVELOPE_BYTES
    if len(payload) > carried:
        raise ServingError(
            "PAYLOAD_TOO_LARGE",
            f"the request's input ({len(payload)} bytes as sent to the model) is larger than NATS "
            f"carries ({carried} bytes)",
            http_status=413,
        )


def _router(edge: Edge, principal: ClientPrincipal, capability: str) -> Route:
    """The call's `Route`, refusing (MODEL_NOT_FOUND, 404) a `model` the capability does not
    know: serving it by the stable deployment would answer for a model the client did not name.
    While nothing serves the capability, the pipeline says so (503) whatever the name."""
    known_names = set(names_of(capability))  # and each name checked once (parse and serve ask)

    def route(requested: str) -> str:
        if requested and requested not in known_names:
            known = edge.ctx.live.catalog.model_names(capability)
            if known and requested not in known:
                raise ServingError(
                    "MODEL_NOT_FOUND",
                    f"no model {requested!r} serves {capability} here: name {' or '.join(map(repr, known))}, "
                    "or leave `model` out",
                    param="model",
                    http_status=404,
                )
            known_names.add(requested)
        return edge.directory.route(principal, capability, requested)

    return route


def _may_call(edge: Edge, principal: ClientPrincipal, capability: str) -> bool:
    try:
        edge.directory.authorize(principal, capability)
    except ServingError:
        return False
    return True


class _Call:
    """One call's progress through the edge: what the answer, or the refusal's record, needs to
    know of how far it got."""

    def __init__(self, request: Request, contract: CapabilityContract) -> None:
        self.started = time.perf_counter()
        self.request_id = request_id_of(request)
        self.authorization = request.headers.get("authorization")
        self.contract = contract
        self.principal: ClientPrincipal | None = None  # once known, a refusal is recorded
        self.admission: Admission | None = None
        self.prepared: Prepared | None = None
        self.serving = False  # past the edge's own checks: later failures are the pipeline's to record
        self.interruption = Interruption()
        self.resolved = self.validated = self.started  # perf_counter() once authorised, validated
        self.deadline = 0.0  # time.time() by which it must be answered

    @property
    def capability(self) -> str:
        return self.contract.capability


async def run_capability(
    edge: Edge,
    request: Request,
    contract: CapabilityContract,
    parse: Parse[JsonValue],
    *,
    choice: ContractChoice | None = None,
) -> Response:
    """A call whose body is JSON (see `run_decoded`)."""
    return await run_decoded(edge, request, contract, parse, decode_json, choice)


async def run_decoded(
    edge: Edge,
    request: Request,
    contract: CapabilityContract,
    parse: Parse[Body],
    decode: Decode[Body],
    choice: ContractChoice | None = None,
) -> Response:
    """A call whose body `decode` reads, for `parse` to check and prepare. `render` may
    answer a dict (sent as JSON, with the request id and latency added), any other JSON value, or
    a whole `Response` (a dialect's plain-text formats)."""
    call = _Call(request, contract)
    try:
        principal, permitted = _authorise(edge, call, choice)
        call.resolved = time.perf_counter()
        raw, timeout_s = await _read_body(edge, request, call, permitted, choice, decode)
        route = _router(edge, principal, call.capability)
        prepared = call.prepared = parse(raw, call.contract, route)
        _check_carried(edge, prepared.payload)
        call.validated = time.perf_counter()
        call.deadline = time.time() + timeout_s
        result = await _serve(edge, request, call, principal, prepared, route)
    except Exception as raised:
        return _refusal(edge, call, raised)
    return _answer(edge, call, result)


def _authorise(
    edge: Edge, call: _Call, choice: ContractChoice | None
) -> tuple[ClientPrincipal, tuple[CapabilityContract, ...]]:
    """The caller's key, and the contracts it may call through the route; from here on a refusal
    is recorded as the request's."""
    with span("authenticate"):
        principal = edge.directory.authenticate(call.authorization)
        permitted = _permitted(edge, principal, call.contract, choice)
    call.principal = principal
    return principal, permitted


def _key_used(edge: Edge, call: _Call, principal: ClientPrincipal) -> None:
    """The key's use, recorded (at most once a minute per credential, `gateway.clients.usage`)
    once the request passed the client's limits, as the reference updated `last_used_at` after
    them: a request they refuse, or one refused before them, is no use of the key."""
    if edge.usage.due(principal.credential_id, time.monotonic()):
        used = ClientKeyUsed(
            client_id=principal.client_id, credential_id=principal.credential_id, capability=call.capability
        )
        record_request(edge.ctx, call.capability, call.request_id, used)


async def _read_body(
    edge: Edge,
    request: Request,
    call: _Call,
    permitted: tuple[CapabilityContract, ...],
    choice: ContractChoice | None,
    decode: Decode[Body],
) -> tuple[Body, float]:
    """The decoded body, read within the permitted contracts' largest limit, and the call's
    deadline in seconds; with a choice, the contract the body is for becomes the call's."""
    timeout_s = _timeout_s(request, call.contract)
    content = await read_limited(request, max(c.limits.max_request_bytes for c in permitted), timeout_s)
    raw = decode(content)
    if choice is not None:
        _choose_contract(edge, call, choice.of_body(raw), permitted, len(content))
        timeout_s = _timeout_s(request, call.contract)  # the chosen contract's deadline from here on
    return raw, timeout_s


def _choose_contract(
    edge: Edge,
    call: _Call,
    chosen: CapabilityContract,
    permitted: tuple[CapabilityContract, ...],
    body_bytes: int,
) -> None:
    """Make `chosen` the call's contract (its scope checked by `_serve`'s re-authorisation from
    here on), refusing it when the key may not call it or the body passes its size limit."""
    assert call.principal is not None
    call.contract = chosen
    if chosen not in permitted:
        edge.directory.authorize(call.principal, chosen.capability)  # the refusal, saying why
    if body_bytes > chosen.limits.max_request_bytes:
        raise too_large(chosen.limits.max_request_bytes)


async def _serve(
    edge: Edge,
    request: Request,
    call: _Call,
    principal: ClientPrincipal,
    prepared: Prepared,
    route: Route,
) -> Served[Any]:
    """The client's limits (overlapping the capacity search where the client is far from them),
    then the pipeline, stopped if the client disconnects before its model runs."""
    admission = call.admission = Admission(edge.limiter, principal)
    admitted = _spanned(admission, lambda: _key_used(edge, call, principal))

    def before_dispatch() -> None:
        edge.directory.authorize(edge.directory.authenticate(call.authorization), call.capability)
        call.interruption.forbid()  # the model runs: its lease lasts until the worker answers

    try:
        if not admission.overlapped:
            await admitted()
        call.serving = True
        return await while_connected(
            request,
            serve(
                edge.ctx,
                _serve_request(call, principal, prepared, route),
                admitted=admitted,
                output=prepared.output,
                render=lambda result: prepared.render(result.result, result, call.request_id),
                before_dispatch=before_dispatch,
            ),
            call.interruption,
        )
    finally:
        edge.ctx.spawn(admission.close())


def _serve_request(call: _Call, principal: ClientPrincipal, prepared: Prepared, route: Route) -> ServeRequest:
    """The request as the pipeline takes it; its model routed once the client is admitted."""
    return ServeRequest(
        request_id=call.request_id,
        client_id=principal.client_id,
        capability=call.capability,
        payload=prepared.payload,
        shape=prepared.shape,
        deadline=call.deadline,
        started=call.started,
        validation_ms=(call.validated - call.resolved) * 1000,
        resolution_ms=(call.resolved - call.started) * 1000,
        model=route(prepared.model),
        priority=principal.priority,
        input_type=prepared.input_type,
    )


def _refusal(edge: Edge, call: _Call, raised: Exception) -> Response:
    """The error answer, in the dialect's status; recorded as the request's only event where the
    edge or the client's limits refused it (the pipeline records its own failures)."""
    error = raised if isinstance(raised, ServingError) else internal_error(raised, call.request_id)
    error = _as_the_dialect_answers(error, call.prepared if call.serving else None)
    refused_here = not call.serving or (call.admission is not None and call.admission.refused)
    if call.principal is not None and refused_here:
        record_rejection(edge.ctx, call.capability, call.request_id, call.principal.client_id, error)
    edge.ctx.metrics.request_ended(
        call.capability, error.code, error.http_status, time.perf_counter() - call.started
    )
    return error_response(error, call.request_id)


def _answer(edge: Edge, call: _Call, result: Served[Any]) -> Response:
    """The served answer: the dialect's rendering, with the request id, latency and deployment."""
    body = result.body
    if isinstance(body, dict):
        body["request_id"] = call.request_id
        body["latency"] = latency_body(result.latency)
    edge.ctx.metrics.request_ended(call.capability, "OK", 200, result.latency.total_ms / 1000, result.latency)
    headers = {**timing_headers(result.latency), "x-mf-deployment": result.deployment_id}
    if isinstance(body, Response):
        body.headers.update(headers)
        return body
    return json_response(body, 200, headers)


def _spanned(admission: Admission, admitted: Callable[[], None]) -> Callable[[], Awaitable[None]]:
    """`admission.settle`, its first call a span of the request's trace (later ones return at
    once), and `admitted` called once the client's limits let the request through."""
    first = True

    async def settle() -> None:
        nonlocal first
        if not first:
            return await admission.settle()
        first = False
        with span("admit"):
            await admission.settle()
        admitted()

    return settle


def _as_the_dialect_answers(error: ServingError, prepared: Prepared | None) -> ServingError:
    """A model's refusal of the input (INVALID_INPUT after dispatch) with the dialect's status."""
    status = prepared.model_refusal_status if prepared is not None else None
    if status is None or error.code != "INVALID_INPUT" or error.http_status != 422:
        return error
    return ServingError(error.code, error.message, error.param, http_status=status, details=error.details)


def _timeout_s(request: Request, contract: CapabilityContract) -> float:
    """A client may shorten (never lengthen) the contract's deadline with `x-request-timeout-ms`."""
    default = contract.limits.default_timeout_ms
    asked = request.headers.get("x-request-timeout-ms", "")
    # isascii: str.isdigit also accepts digits such as "²" that int() refuses
    timeout_ms = (
        min(default, int(asked)) if asked.isascii() and asked.isdigit() and int(asked) > 0 else default
    )
    return timeout_ms / 1000
