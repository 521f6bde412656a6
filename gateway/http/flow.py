"""The shape every capability call takes at the edge, whatever API dialect it arrives in.

authenticate → authorise the capability → read the body within its limit → parse and validate
(the dialect's job) → client limits (alongside the capacity search when the client is far from
them: `gateway.clients.admission`) → serve, stopped if the client disconnects before its model
runs (`gateway.http.disconnect`) → render (the dialect's job). A refusal, by the
checks or the client's limits, is recorded as the request's only event (`RequestRejected`);
later failures are recorded by the pipeline.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from gateway.clients.admission import Admission
from gateway.clients.model import ClientPrincipal
from gateway.http.body import decode_json, read_limited
from gateway.http.disconnect import Interruption, while_connected
from gateway.http.edge import Edge
from gateway.http.responses import error_response, json_response, latency_body, timing_headers
from gateway.http.stamps import request_id_of
from gateway.serving.pipeline import (
    RequestShape,
    Served,
    internal_error,
    record_rejection,
    serve,
)
from streams.codes import ServingError
from streams.contracts import CapabilityContract


class Prepared(msgspec.Struct, frozen=True):
    """A validated call: the contract input to send, its shape, and how to answer in the dialect."""

    payload: bytes
    shape: RequestShape
    render: Callable[[bytes, Served, str], object]
    model: str = ""  # an experiment's route, where the dialect names one


Parse = Callable[[Any, CapabilityContract], Prepared]


def check_texts(
    texts: list[str], contract: CapabilityContract, param: str, too_large: str = "INVALID_INPUT"
) -> RequestShape:
    """The contract's limits on a list of texts; `too_large` is the code for texts over the total
    (the seed reports reranking's as RERANK_REQUEST_TOO_LARGE)."""
    limits = contract.limits
    if not texts:
        raise ServingError("INVALID_INPUT", f"`{param}` must not be empty", param=param)
    if len(texts) > limits.max_items:
        raise ServingError(
            "INVALID_INPUT", f"`{param}` has {len(texts)} items; at most {limits.max_items}", param=param
        )
    total = 0
    for index, text in enumerate(texts):
        if not text.strip():
            raise ServingError("INVALID_INPUT", f"`{param}[{index}]` is empty", param=param)
        if limits.max_chars_per_item and len(text) > limits.max_chars_per_item:
            raise ServingError(
                "INVALID_INPUT",
                f"`{param}[{index}]` has {len(text)} characters; at most {limits.max_chars_per_item}",
                param=param,
            )
        total += len(text)
    if limits.max_total_chars and total > limits.max_total_chars:
        raise ServingError(
            too_large,
            f"`{param}` totals {total} characters; at most {limits.max_total_chars}",
            param=param,
            http_status=413,
        )
    return RequestShape(items=len(texts), chars=total)


async def run_capability(
    edge: Edge, request: Request, contract: CapabilityContract, parse: Parse
) -> Response:
    started = time.perf_counter()
    request_id = request_id_of(request)
    capability = contract.capability
    principal: ClientPrincipal | None = None
    admission: Admission | None = None
    serving = False
    authorization = request.headers.get("authorization")

    interruption = Interruption()

    def authorized() -> ClientPrincipal:
        found = edge.directory.authenticate(authorization)
        edge.directory.authorize(found, capability)
        return found

    def before_dispatch() -> None:
        authorized()  # a key withdrawn while the request waited is refused here
        interruption.forbid()  # the model runs: its lease lasts until the worker answers

    try:
        principal = authorized()
        resolved = time.perf_counter()
        timeout_s = _timeout_s(request, contract)
        raw = decode_json(await read_limited(request, contract.limits.max_request_bytes, timeout_s))
        prepared = parse(raw, contract)
        validated = time.perf_counter()
        deadline = time.time() + timeout_s
        admission = Admission(edge.limiter, principal)
        try:
            if not admission.overlapped:
                await admission.settle()
            serving = True
            result = await while_connected(
                request,
                serve(
                    edge.ctx,
                    request_id=request_id,
                    client_id=principal.client_id,
                    capability=capability,
                    payload=prepared.payload,
                    shape=prepared.shape,
                    deadline=deadline,
                    started=started,
                    validation_ms=(validated - resolved) * 1000,
                    resolution_ms=(resolved - started) * 1000,
                    model=prepared.model,
                    admitted=admission.settle,
                    priority=principal.priority,
                    render=lambda served: prepared.render(served.result, served, request_id),
                    before_dispatch=before_dispatch,
                ),
                interruption,
            )
        finally:
            edge.ctx.spawn(admission.close())
    except Exception as raised:
        error = raised if isinstance(raised, ServingError) else internal_error(raised, request_id)
        if principal is not None and (not serving or (admission is not None and admission.refused)):
            record_rejection(edge.ctx, capability, request_id, principal.client_id, error)
        edge.metrics.observe(
            capability, error.code, error.http_status, (time.perf_counter() - started) * 1000
        )
        return error_response(error, request_id)
    body = result.body
    if isinstance(body, dict):
        body["request_id"] = request_id
        body["latency"] = latency_body(result.latency)
    edge.metrics.observe(capability, "OK", 200, result.latency.total_ms)
    headers = {**timing_headers(result.latency), "x-mf-deployment": result.deployment_id}
    return json_response(body, 200, headers)


def _timeout_s(request: Request, contract: CapabilityContract) -> float:
    """A client may shorten (never lengthen) the contract's deadline with `x-request-timeout-ms`."""
    default = contract.limits.default_timeout_ms
    asked = request.headers.get("x-request-timeout-ms", "")
    # isascii: str.isdigit also accepts digits such as "²" that int() refuses
    timeout_ms = (
        min(default, int(asked)) if asked.isascii() and asked.isdigit() and int(asked) > 0 else default
    )
    return timeout_ms / 1000
