"""One request of a run (`Member`): accepted, refused at dispatch, failed or completed, and
answered, each as itself, with its own events (MF_REQUESTS), trace, latency and usage, whether it
runs alone or shares its run (`Run`) with others (`gateway.serving.shared_runs`)."""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypedDict, TypeVar

import msgspec

from gateway.deployments.model import DeploymentState
from gateway.serving import capacity
from gateway.serving.background import record_request
from gateway.serving.context import ServingContext
from gateway.serving.dispatch import Invoked
from gateway.serving.outputs import OutputReader
from gateway.serving.requests import Served, ServeRequest, cancelled, internal_error
from gateway.serving.shared_runs import Shareable
from streams.codes import ServingError
from streams.events.requests import (
    Acceptance,
    LatencyBreakdown,
    RequestCompleted,
    RequestFailed,
    Usage,
)
from streams.tracing import current_trace_id

T = TypeVar("T")
U = TypeVar("U")


class Member:
    """One request of a run, answered, refused and recorded as itself."""

    __slots__ = (
        "accepted",
        "accepted_at",
        "before_dispatch",
        "context",
        "deployment",
        "ended",
        "joined",
        "outcome",
        "output",
        "render",
        "request",
        "run",
        "shared",
        "trace_id",
        "withdrawn",
    )

    def __init__(
        self,
        request: ServeRequest,
        deployment: DeploymentState,
        output: OutputReader[Any],
        render: Callable[[Served[Any]], object] | None,
        before_dispatch: Callable[[], object],
    ) -> None:
        self.request, self.deployment, self.output = request, deployment, output
        self.render, self.before_dispatch = render, before_dispatch
        self.outcome: asyncio.Future[Served[Any]] = asyncio.get_running_loop().create_future()
        self.trace_id = current_trace_id()
        self.shared: Shareable | None = None  # its key and texts, once it waits to share a run
        self.context: contextvars.Context | None = None  # its trace, for the run it departs in
        self.joined = 0.0  # perf_counter() when it joined a group: forming counts as queueing
        self.run: Run | None = None
        self.accepted = self.ended = self.withdrawn = False  # ended: its last event is recorded
        self.accepted_at = 0.0  # time.time() when it was accepted


class Run:
    """Members served with one lease and one invoke (one member: a request going alone)."""

    def __init__(self, members: list[Member]) -> None:
        self.members = members
        self.deployment = members[0].deployment
        self.departed = time.perf_counter()
        self.started = self.dispatched = False
        self.task: asyncio.Task[object] | None = None  # a group's own task (a lone run is its request's)
        for member in members:
            member.run = self


def settle(outcome: asyncio.Future[Served[Any]], error: BaseException) -> None:
    """A member's outcome, failed with `error` (or cancelled with its run); one its request no
    longer waits for is left as it is."""
    if outcome.done():
        return
    if cancelled(error):
        outcome.cancel()
    else:
        outcome.set_exception(error)


def accept(ctx: ServingContext, member: Member) -> None:
    """`member` is accepted: its acceptance is recorded in a moment, or carried by its end event
    should it end before then (`gateway.serving.acceptances`)."""
    member.accepted = True
    member.accepted_at = time.time()
    ctx.acceptances.hold(member, lambda: _record_accepted(ctx, member))


def _acceptance(ctx: ServingContext, member: Member) -> Acceptance:
    request = member.request
    return Acceptance(
        input_sha256=hashlib.sha256(request.payload).hexdigest(),
        shape_bucket=request.shape.bucket,
        items=request.shape.items,
        input_type=request.input_type,
        gateway_id=ctx.gateway_id,
        accepted_at=datetime.fromtimestamp(member.accepted_at, UTC),
    )


def _record_accepted(ctx: ServingContext, member: Member) -> None:
    """`member`'s acceptance as a `RequestAccepted` of its own, at the time it was accepted."""
    acceptance = _acceptance(ctx, member)
    request = member.request
    event = acceptance.alone(request.request_id, request.client_id, request.capability, member.trace_id)
    record_request(ctx, request.capability, request.request_id, event, acceptance.accepted_at)


def dispatchable(ctx: ServingContext, run: Run) -> list[Member]:
    """The members the model runs for: each passes its own `before_dispatch` (one refused there,
    or whose client went away, fails alone)."""
    ready: list[Member] = []
    for member in run.members:
        if not member.accepted:
            continue  # its client went away before the run was accepted
        try:
            if member.withdrawn:
                raise ServingError("REQUEST_CANCELLED", "the client disconnected before the request finished")
            member.before_dispatch()
        except Exception as refused:
            fail(ctx, member, failure_of(refused, member.request.request_id), refused)
            continue
        ready.append(member)
    return ready


def fail(ctx: ServingContext, member: Member, failure: ServingError, error: BaseException) -> None:
    """`member` ends as `failure` (its outcome: `error` where it was cancelled)."""
    request = member.request
    latency = LatencyBreakdown(
        validation_ms=request.validation_ms,
        resolution_ms=request.resolution_ms,
        total_ms=(time.perf_counter() - request.started) * 1000,
    )
    _ended(
        ctx,
        member,
        RequestFailed(
            **_ending(ctx, member),
            code=failure.code,
            http_status=failure.http_status,
            deployment_id=member.deployment.deployment_id,
            latency=latency,
        ),
    )
    settle(member.outcome, error if cancelled(error) else failure)


class _Ending(TypedDict):
    request_id: str
    client_id: str
    capability: str
    trace_id: str
    accepted: Acceptance | None


def _ending(ctx: ServingContext, member: Member) -> _Ending:
    """What `member`'s end event names it by, with its acceptance where that is still held (not
    recorded now: the end event carries it)."""
    request = member.request
    held = member.accepted and ctx.acceptances.take(member)
    return _Ending(
        request_id=request.request_id,
        client_id=request.client_id,
        capability=request.capability,
        trace_id=member.trace_id,
        accepted=_acceptance(ctx, member) if held else None,
    )


def _ended(ctx: ServingContext, member: Member, event: RequestCompleted | RequestFailed) -> None:
    """`member`'s last event, recorded."""
    member.ended = True
    record_request(ctx, member.request.capability, member.request.request_id, event)


def output_failure(error: Exception) -> ServingError:
    if isinstance(error, ServingError):
        return error
    return ServingError("INVALID_OUTPUT", f"the worker's output could not be read ({type(error).__name__})")


def answer_of(
    grant: capacity.Grant, invoked: Invoked[Any], member: Member, result: Any, departed: float
) -> tuple[Served[Any], Usage]:
    """`member`'s answer (rendered) and usage from its part of the output."""
    request = member.request
    forming_ms = (departed - member.joined) * 1000 if member.joined else 0.0
    latency = _latency(grant, invoked, request, forming_ms)
    usage = Usage(items=request.shape.items, input_tokens=_output_of(member.output.tokens, result))
    served = Served(result, grant.deployment_id, member.deployment.model_name, latency, grant.cold)
    if member.render is not None:
        served = msgspec.structs.replace(served, body=_output_of(member.render, served))
    return served, usage


def complete(
    ctx: ServingContext, member: Member, grant: capacity.Grant, served: Served[Any], usage: Usage
) -> None:
    _ended(
        ctx,
        member,
        RequestCompleted(
            **_ending(ctx, member),
            deployment_id=grant.deployment_id,
            node_id=grant.node_id,
            accelerator_id=grant.accelerator_id,
            cold=grant.cold,
            latency=served.latency,
            usage=usage,
            standby_lease_id=grant.standby_lease_id,
        ),
    )
    if not member.outcome.done():
        member.outcome.set_result(served)


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


def _latency(
    grant: capacity.Grant, invoked: Invoked[Any], request: ServeRequest, forming_ms: float
) -> LatencyBreakdown:
    """The stage breakdown of a served request; what no stage accounts for is the gateway's own.
    `forming_ms`: how long it waited for a run to share (queueing, as waiting for capacity is)."""
    started, validation_ms, resolution_ms = request.started, request.validation_ms, request.resolution_ms
    worker = invoked.worker
    worker_ms = worker.queue_ms + worker.preprocess_ms + worker.inference_ms + worker.serialize_ms
    total = (time.perf_counter() - started) * 1000
    accounted = (
        validation_ms
        + resolution_ms
        + grant.scheduling_ms
        + grant.load_ms
        + grant.queue_ms
        + forming_ms
        + invoked.payload_ms
        + invoked.round_trip_ms
    )
    return LatencyBreakdown(
        validation_ms=validation_ms,
        resolution_ms=resolution_ms,
        scheduling_ms=grant.scheduling_ms,
        load_ms=grant.load_ms,
        queue_ms=forming_ms + grant.queue_ms + worker.queue_ms,
        payload_ms=invoked.payload_ms,
        dispatch_ms=invoked.round_trip_ms,
        worker_preprocess_ms=worker.preprocess_ms,
        worker_inference_ms=worker.inference_ms,
        worker_serialize_ms=worker.serialize_ms,
        transport_ms=max(0.0, invoked.round_trip_ms - worker_ms),
        gateway_ms=max(0.0, total - accounted),
        total_ms=total,
    )


def failure_of(error: BaseException, request_id: str) -> ServingError:
    if isinstance(error, ServingError):
        return error
    if isinstance(error, Exception):
        return internal_error(error, request_id)
    # cancelled (a shutdown): nobody is left to answer, but the books must still close
    return ServingError("REQUEST_CANCELLED", "the request was cancelled before it finished")
