"""A request as the serving pipeline takes it from the edge and answers it: its shape, what the
edge hands over (`ServeRequest`), what it is answered with (`Served`), and how a fault or a refusal
before acceptance is told and recorded."""

from __future__ import annotations

import logging
from typing import Generic

import msgspec

from gateway.serving.background import record_request
from gateway.serving.context import ServingContext
from gateway.serving.outputs import Output
from streams.codes import ServingError
from streams.events.requests import LatencyBreakdown, RequestRejected
from streams.redaction import fault_summary
from streams.tracing import current_trace_id

log = logging.getLogger("modelforge.gateway.pipeline")


class RequestShape(msgspec.Struct, frozen=True):
    items: int
    chars: int

    @property
    def bucket(self) -> str:
        return f"items:{_bucket(self.items)}/chars:{_bucket(self.chars)}"


def _bucket(n: int) -> str:
    """Powers-of-four buckets: the shape of a request without its content."""
    upper = 1
    while upper < n:
        upper *= 4
    return f"{upper // 4 + 1 if upper > 1 else 0}-{upper}"


class ServeRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One request as the edge hands it to the pipeline: who asks for which capability, the
    contract input (recorded only as its hash and shape), and its clock so far."""

    request_id: str
    client_id: str
    capability: str
    payload: bytes
    shape: RequestShape
    deadline: float  # time.time() by which it must be answered
    started: float  # time.perf_counter() when the edge received it
    validation_ms: float
    resolution_ms: float
    model: str = ""  # the model name it is served by ("": the capability's stable deployment)
    priority: int = 0
    input_type: str = ""  # an embedding request's "query" | "document" ("": not given)


class Served(msgspec.Struct, Generic[Output], frozen=True):
    result: Output  # the contract's output, as the caller's reader read it
    deployment_id: str
    model_name: str
    latency: LatencyBreakdown
    cold: bool
    body: object = None  # the caller's rendering of `result`, made before the request is recorded


def cancelled(error: BaseException) -> bool:
    return not isinstance(error, Exception)  # CancelledError, and KeyboardInterrupt / SystemExit


def internal_error(error: Exception, request_id: str) -> ServingError:
    """A fault with no code of its own: logged (its type and traceback; never its message, which
    may quote the request's content)."""
    log.error("request %s failed: %s", request_id, fault_summary(error))
    return ServingError(
        "INTERNAL_ERROR",
        f"the gateway failed to serve this request ({type(error).__name__})",
        http_status=500,
    )


def record_rejection(
    ctx: ServingContext,
    capability: str,
    request_id: str,
    client_id: str,
    refusal: ServingError,
    trace_id: str | None = None,
) -> None:
    """A request refused before it was accepted: this is its only event (`trace_id`: its trace's,
    where it is not the current one)."""
    rejected = RequestRejected(
        request_id=request_id,
        client_id=client_id,
        capability=capability,
        code=refusal.code,
        http_status=refusal.http_status,
        trace_id=current_trace_id() if trace_id is None else trace_id,
    )
    record_request(ctx, capability, request_id, rejected)
