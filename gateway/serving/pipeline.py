"""One request end to end: get capacity (while the client's limits settle), accept, invoke,
release, record — with its timings.

Request events (MF_REQUESTS) and the lease release are written off the response's path: the
client gets its answer as soon as the model replies; every path releases the lease and records
how the request ended.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

import msgspec

from gateway.deployments.model import DeploymentState
from gateway.deployments.weights import RoutingKey
from gateway.serving import capacity
from gateway.serving.background import record_request
from gateway.serving.context import ServingContext
from gateway.serving.dispatch import NODE_LOST, Invoked, NodeUnreachable, invoke
from gateway.serving.outputs import Output, OutputReader
from streams.codes import ServingError
from streams.events.requests import (
    LatencyBreakdown,
    RequestAccepted,
    RequestCompleted,
    RequestFailed,
    RequestRejected,
    Usage,
)
from streams.redaction import fault_summary
from streams.tracing import current_trace_id

log = logging.getLogger("modelforge.gateway.pipeline")
T = TypeVar("T")
U = TypeVar("U")


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
    ctx: ServingContext, capability: str, request_id: str, client_id: str, refusal: ServingError
) -> None:
    """A request refused before it was accepted: this is its only event."""
    rejected = RequestRejected(
        request_id=request_id,
        client_id=client_id,
        capability=capability,
        code=refusal.code,
        http_status=refusal.http_status,
        trace_id=current_trace_id(),
    )
    record_request(ctx, capability, request_id, rejected)


async def _give_back(ctx: ServingContext, seeking: asyncio.Future[capacity.Grant]) -> None:
    """A refused request's capacity search stops (leaving the queue if it waits there; a lease
    it was appending is given back once it lands); a lease it already got is given back here."""
    seeking.cancel()
    await asyncio.wait([seeking])  # (raises only if this task itself is cancelled)
    if not seeking.cancelled() and seeking.exception() is None:
        await capacity.release(ctx, seeking.result(), "cancelled")


async def serve(
    ctx: ServingContext,
    request: ServeRequest,
    *,
    admitted: Callable[[], Awaitable[None]],
    output: OutputReader[Output],
    render: Callable[[Served[Output]], object] | None = None,
    before_dispatch: Callable[[], object] = lambda: None,
) -> Served[Output]:
    """Serve one admitted request; `admitted` raises the client limits' refusal, if any, and is
    settled before anything is recorded (the caller records a refusal as `RequestRejected`).
    `before_dispatch` is called once the request has its lease, just before the model runs: it
    raises to refuse the request (a key withdrawn while it waited for capacity: revoked, expired,
    client disabled).
    `output` reads the worker's reply (`gateway.serving.outputs`), and the tokens for usage from it.
    `render` turns the worker's output into the answer (`Served.body`); an output it cannot render
    fails the request as INVALID_OUTPUT, as one the contract refuses does."""
    request_id, client_id, capability = request.request_id, request.client_id, request.capability
    payload, shape, deadline, priority = request.payload, request.shape, request.deadline, request.priority
    started, validation_ms, resolution_ms = request.started, request.validation_ms, request.resolution_ms
    key = RoutingKey(client_id, request_id)  # a canary's weighted split hashes it
    deployment = ctx.live.catalog.resolve(capability, request.model, key)
    if deployment is None:
        await admitted()  # the client's limits answer first, as when they are checked beforehand
        unavailable = ServingError(
            "CAPABILITY_UNAVAILABLE", ctx.live.catalog.unavailable(capability), http_status=503
        )
        record_rejection(ctx, capability, request_id, client_id, unavailable)
        raise unavailable
    taken: asyncio.Future[ServingError | None] = asyncio.get_running_loop().create_future()
    seeking = asyncio.ensure_future(
        capacity.acquire(ctx, deployment, request_id, client_id, deadline, priority, taken=taken)
    )
    try:
        await admitted()
        # A request its deployment's queue refuses (QUEUE_FULL) is refused, as one over its
        # client's limits is; one that runs or waits in that queue is accepted.
        if (queue_full := await asyncio.shield(taken)) is not None:
            record_rejection(ctx, capability, request_id, client_id, queue_full)
            raise queue_full
    except BaseException:  # refused (or cancelled): the search's lease, if it gets one, goes back
        ctx.spawn(_give_back(ctx, seeking))
        raise
    record_request(
        ctx,
        capability,
        request_id,
        RequestAccepted(
            request_id=request_id,
            client_id=client_id,
            capability=capability,
            input_sha256=hashlib.sha256(payload).hexdigest(),
            shape_bucket=shape.bucket,
            items=shape.items,
            trace_id=current_trace_id(),
            input_type=request.input_type,
        ),
    )
    grant: capacity.Grant | None = None
    try:
        grant = await seeking
        before_dispatch()
        try:
            invoked = await invoke(
                ctx, grant, capability, request_id, payload, deadline, output, request.input_type
            )
        except ServingError as lost:
            if lost.code != NODE_LOST and not isinstance(lost, NodeUnreachable):
                raise
            # Its node was lost mid-flight (the lease left the books with it), or its agent is gone
            # (the lease goes back now): once more, on another accelerator.
            log.warning("request %s: %s; trying it again", request_id, lost.message)
            if isinstance(lost, NodeUnreachable):
                ctx.spawn(capacity.release(ctx, grant, "failed"))
            elif grant.run_slot is not None:  # the lease went with its node; its run slot goes now
                ctx.spawn(grant.run_slot.release())
            gone, grant = grant.accelerator_id, None
            grant = await _elsewhere(ctx, deployment, request_id, client_id, deadline, priority, gone, lost)
            invoked = await invoke(
                ctx, grant, capability, request_id, payload, deadline, output, request.input_type
            )
        latency = _latency(grant, invoked, started, validation_ms, resolution_ms)
        usage = Usage(items=shape.items, input_tokens=_output_of(output.tokens, invoked.result))
        served = Served(invoked.result, grant.deployment_id, deployment.model_name, latency, grant.cold)
        if render is not None:
            served = msgspec.structs.replace(served, body=_output_of(render, served))
    except BaseException as error:
        if grant is None and seeking.done() and not seeking.cancelled() and seeking.exception() is None:
            grant = seeking.result()  # cancelled just as its lease was granted: still ours to give back
        if isinstance(error, ServingError):
            failure = error
        elif isinstance(error, Exception):
            failure = internal_error(error, request_id)
        else:  # cancelled (a shutdown): nobody is left to answer, but the books must still close
            failure = ServingError("REQUEST_CANCELLED", "the request was cancelled before it finished")
        if grant is not None:
            ctx.spawn(capacity.release(ctx, grant, "cancelled" if cancelled(error) else "failed"))
        latency = LatencyBreakdown(
            validation_ms=validation_ms,
            resolution_ms=resolution_ms,
            total_ms=(time.perf_counter() - started) * 1000,
        )
        record_request(
            ctx,
            capability,
            request_id,
            RequestFailed(
                request_id=request_id,
                client_id=client_id,
                capability=capability,
                code=failure.code,
                http_status=failure.http_status,
                deployment_id=deployment.deployment_id,
                latency=latency,
                trace_id=current_trace_id(),
            ),
        )
        if failure is error or cancelled(error):
            raise
        raise failure from error
    ctx.spawn(capacity.release(ctx, grant, "completed"))
    record_request(
        ctx,
        capability,
        request_id,
        RequestCompleted(
            request_id=request_id,
            client_id=client_id,
            capability=capability,
            deployment_id=grant.deployment_id,
            node_id=grant.node_id,
            accelerator_id=grant.accelerator_id,
            cold=grant.cold,
            latency=latency,
            usage=usage,
            trace_id=current_trace_id(),
        ),
    )
    return served


def _output_of(read: Callable[[T], U], output: T) -> U:
    """`read(output)`, where any failure means the worker's output is not what its contract says."""
    try:
        return read(output)
    except ServingError:
        raise
    except Exception as error:
        raise ServingError(
            "INVALID_OUTPUT", f"the worker's output could not be read ({type(error).__name__})"
        ) from None


async def _elsewhere(
    ctx: ServingContext,
    deployment: DeploymentState,
    request_id: str,
    client_id: str,
    deadline: float,
    priority: int,
    gone: str,
    lost: ServingError,
) -> capacity.Grant:
    """A lease for the retry, anywhere but `gone`. An unreachable agent with no other accelerator
    to go to is answered as it was (CAPABILITY_UNAVAILABLE), not as a placement refusal."""
    try:
        return await capacity.acquire(ctx, deployment, request_id, client_id, deadline, priority, gone)
    except ServingError as refused:
        if isinstance(lost, NodeUnreachable) and refused.code == "NO_ELIGIBLE_NODE":
            raise lost from None
        raise


def _latency(
    grant: capacity.Grant,
    invoked: Invoked[Output],
    started: float,
    validation_ms: float,
    resolution_ms: float,
) -> LatencyBreakdown:
    """The stage breakdown of a served request; what no stage accounts for is the gateway's own."""
    worker = invoked.worker
    worker_ms = worker.queue_ms + worker.preprocess_ms + worker.inference_ms + worker.serialize_ms
    total = (time.perf_counter() - started) * 1000
    accounted = (
        validation_ms
        + resolution_ms
        + grant.scheduling_ms
        + grant.load_ms
        + grant.queue_ms
        + invoked.payload_ms
        + invoked.round_trip_ms
    )
    return LatencyBreakdown(
        validation_ms=validation_ms,
        resolution_ms=resolution_ms,
        scheduling_ms=grant.scheduling_ms,
        load_ms=grant.load_ms,
        queue_ms=grant.queue_ms + worker.queue_ms,
        payload_ms=invoked.payload_ms,
        dispatch_ms=invoked.round_trip_ms,
        worker_preprocess_ms=worker.preprocess_ms,
        worker_inference_ms=worker.inference_ms,
        worker_serialize_ms=worker.serialize_ms,
        transport_ms=max(0.0, invoked.round_trip_ms - worker_ms),
        gateway_ms=max(0.0, total - accounted),
        total_ms=total,
    )
