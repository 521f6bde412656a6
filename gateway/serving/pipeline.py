"""One request end to end: get capacity (while the client's limits settle), accept, invoke,
release, record — with its timings.

Request events (MF_REQUESTS) and the lease release are written off the response's path: the
client gets its answer as soon as the model replies; every path releases the lease and records
how the request ended.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypedDict, TypeVar

import msgspec

from gateway.deployments.model import DeploymentState
from gateway.deployments.weights import RoutingKey
from gateway.serving import capacity
from gateway.serving.background import record_request
from gateway.serving.coalescing import Room
from gateway.serving.context import ServingContext
from gateway.serving.dispatch import ENVELOPE_BYTES, NODE_LOST, Invoked, NodeUnreachable, invoke
from gateway.serving.outputs import JSON_OUTPUT, Output, OutputReader
from gateway.serving.shared_runs import Shareable, joint_input, shareable, split_output
from streams.codes import ServingError
from streams.contracts import EMBEDDING
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


async def _give_back(ctx: ServingContext, seeking: asyncio.Future[capacity.Grant]) -> None:
    """A refused request's capacity search stops (leaving the queue if it waits there; a lease
    it was appending is given back once it lands); a lease it already got is given back here."""
    seeking.cancel()
    await asyncio.wait([seeking])  # (raises only if this task itself is cancelled)
    if not seeking.cancelled() and seeking.exception() is None:
        await capacity.release(ctx, seeking.result(), "cancelled")


class _Member:
    """One request of a run, answered, refused and recorded as itself."""

    __slots__ = (
        "accepted",
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
        self.run: _Run | None = None
        self.accepted = self.ended = self.withdrawn = False  # ended: its last event is recorded


class _Run:
    """Members served with one lease and one invoke (one member: a request going alone)."""

    def __init__(self, members: list[_Member]) -> None:
        self.members = members
        self.deployment = members[0].deployment
        self.departed = time.perf_counter()
        self.started = self.dispatched = False
        self.task: asyncio.Task[object] | None = None  # a group's own task (a lone run is its request's)
        for member in members:
            member.run = self


async def _settled() -> None:
    """A group's members were admitted before they joined it."""


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
    fails the request as INVALID_OUTPUT, as one the contract refuses does.
    While this gateway runs enough of its deployment's requests, a request that may share a run
    (`gateway.serving.shared_runs`) waits for the next one, once its client's limits let it."""
    capability = request.capability
    key = RoutingKey(request.client_id, request.request_id)  # a canary's weighted split hashes it
    deployment = ctx.live.catalog.resolve(capability, request.model, key)
    if deployment is None:
        await admitted()  # the client's limits answer first, as when they are checked beforehand
        unavailable = ServingError(
            "CAPABILITY_UNAVAILABLE", ctx.live.catalog.unavailable(capability), http_status=503
        )
        record_rejection(ctx, capability, request.request_id, request.client_id, unavailable)
        raise unavailable
    member = _Member(request, deployment, output, render, before_dispatch)
    deployment_id, coalescing = deployment.deployment_id, ctx.coalescing
    if coalescing.busy(deployment_id):
        shared = shareable(capability, deployment_id, request.payload, request.input_type, request.priority)
        if shared is not None:
            await admitted()  # a request its limits refuse never joins a group
            if coalescing.busy(deployment_id):
                return await _in_group(ctx, member, shared)
    coalescing.started(deployment_id)
    await _serve_run(ctx, _Run([member]), admitted)
    return member.outcome.result()


async def _in_group(ctx: ServingContext, member: _Member, shared: Shareable) -> Served[Any]:
    """`member` joins the group forming for its key, and is answered by that group's run. Its
    client going away takes it out of the group, or of the run before its model runs; the run
    stops only once no member is left in it. Its deadline passing while the group forms ends it
    alone (REQUEST_TIMEOUT, as waiting for capacity does); once departed, the run keeps its
    earliest member's deadline."""
    member.shared, member.joined, member.context = shared, time.perf_counter(), contextvars.copy_context()
    room = Room(
        min(member.deployment.max_batch_size, EMBEDDING.limits.max_items),
        ctx.client.max_payload - ENVELOPE_BYTES,
    )
    size = len(member.request.payload)
    for group in ctx.coalescing.join(
        shared.key, shared.key.deployment_id, member, len(shared.texts), size, room
    ):
        _depart(ctx, group)
    try:
        await asyncio.wait([member.outcome], timeout=max(0.0, member.request.deadline - time.time()))
        if not member.outcome.done() and ctx.coalescing.leave(shared.key, member):
            _accept(ctx, member)  # it waited, as one in the capacity queue does
            late = ServingError("REQUEST_TIMEOUT", "no run to share began before the deadline")
            _fail(ctx, member, late, late)
        return await member.outcome
    except asyncio.CancelledError:
        member.outcome.cancel()  # no one waits for it now
        member.withdrawn = True
        run = member.run
        if ctx.coalescing.leave(shared.key, member) or run is None or run.dispatched:
            raise
        # (a run not started yet finds no one left when it starts: cancelled before its first step,
        # it would never count itself out of the runs in flight)
        if run.task is not None and run.started and all(m.withdrawn for m in run.members):
            run.task.cancel()
        raise


def _depart(ctx: ServingContext, members: list[_Member]) -> None:
    run = _Run(members)
    run.task = ctx.spawn(_serve_run(ctx, run, _settled), context=members[0].context)


async def _serve_run(ctx: ServingContext, run: _Run, admitted: Callable[[], Awaitable[None]]) -> None:
    """Serve `run`'s members: every member's outcome is set (cancelled where the run is), and
    once its invoke ends, the next group of its deployment departs."""
    run.started = True
    try:
        ran = await _invoked(ctx, run, admitted)
    finally:
        for group in ctx.coalescing.finished(run.deployment.deployment_id):
            _depart(ctx, group)
    if ran is not None:
        _answer(ctx, run, *ran)


async def _invoked(
    ctx: ServingContext, run: _Run, admitted: Callable[[], Awaitable[None]]
) -> tuple[capacity.Grant, Invoked[Any], list[_Member]] | None:
    """The run's lease, the model's answer and the members it answers; None when the run ended
    without one (its members' outcomes then set)."""
    members, deployment = run.members, run.deployment
    if all(m.withdrawn for m in members):
        return None  # every client went away before the run started
    first = members[0].request
    deadline = min(m.request.deadline for m in members)
    taken: asyncio.Future[ServingError | None] = asyncio.get_running_loop().create_future()
    sharing = tuple(m.request.request_id for m in members[1:])
    seeking = asyncio.ensure_future(_lease(ctx, deployment, first, deadline, sharing, taken=taken))
    try:
        await admitted()
        # A request its deployment's queue refuses (QUEUE_FULL) is refused, as one over its
        # client's limits is; one that runs or waits in that queue is accepted.
        if (queue_full := await asyncio.shield(taken)) is not None:
            for member in members:
                record_rejection(
                    ctx,
                    first.capability,
                    member.request.request_id,
                    member.request.client_id,
                    queue_full,
                    member.trace_id,
                )
            raise queue_full
    except BaseException as error:  # refused (or cancelled): the search's lease, if it gets one, goes back
        ctx.spawn(_give_back(ctx, seeking))
        for member in members:
            _settle(member.outcome, error)
        if cancelled(error):
            raise
        return None
    for member in members:
        if not member.withdrawn:
            _accept(ctx, member)
    grant: capacity.Grant | None = None
    try:
        grant = await seeking
        ready = _dispatchable(ctx, run)
        if not ready:
            ctx.spawn(capacity.release(ctx, grant, "failed"))
            return None
        run.dispatched = True
        # A member alone is read by its own reader; a shared run's output as JSON, to be cut up.
        payload, reader = ready[0].request.payload, ready[0].output
        if len(ready) > 1:
            shared = [m.shared for m in ready if m.shared is not None]
            payload, reader = joint_input(shared[0].key, [s.texts for s in shared]), JSON_OUTPUT
        request_id = ready[0].request.request_id
        try:
            invoked = await invoke(
                ctx, grant, first.capability, request_id, payload, deadline, reader, first.input_type
            )
        except ServingError as lost:
            if lost.code != NODE_LOST and not isinstance(lost, NodeUnreachable):
                raise
            # Its node was lost mid-flight (the lease left the books with it), or its agent is gone
            # (the lease goes back now): once more, on another accelerator.
            log.warning("request %s: %s; trying it again", first.request_id, lost.message)
            if isinstance(lost, NodeUnreachable):
                ctx.spawn(capacity.release(ctx, grant, "failed"))
            elif grant.run_slot is not None:  # the lease went with its node; its run slot goes now
                ctx.spawn(grant.run_slot.release())
            gone, grant = grant.accelerator_id, None
            grant = await _elsewhere(ctx, deployment, first, deadline, gone, lost, sharing)
            invoked = await invoke(
                ctx, grant, first.capability, request_id, payload, deadline, reader, first.input_type
            )
        return grant, invoked, ready
    except BaseException as error:
        if grant is None and seeking.done() and not seeking.cancelled() and seeking.exception() is None:
            grant = seeking.result()  # cancelled just as its lease was granted: still ours to give back
        if grant is not None:
            ctx.spawn(capacity.release(ctx, grant, "cancelled" if cancelled(error) else "failed"))
        failure = _failure(error, first.request_id)
        for member in members:
            if member.accepted and not member.ended:
                _fail(ctx, member, failure, error)
        if cancelled(error):
            raise
        return None


def _failure(error: BaseException, request_id: str) -> ServingError:
    if isinstance(error, ServingError):
        return error
    if isinstance(error, Exception):
        return internal_error(error, request_id)
    # cancelled (a shutdown): nobody is left to answer, but the books must still close
    return ServingError("REQUEST_CANCELLED", "the request was cancelled before it finished")


def _settle(outcome: asyncio.Future[Served[Any]], error: BaseException) -> None:
    """A member's outcome, failed with `error` (or cancelled with its run); one its request no
    longer waits for is left as it is."""
    if outcome.done():
        return
    if cancelled(error):
        outcome.cancel()
    else:
        outcome.set_exception(error)


def _accept(ctx: ServingContext, member: _Member) -> None:
    request = member.request
    member.accepted = True
    record_request(
        ctx,
        request.capability,
        request.request_id,
        RequestAccepted(
            request_id=request.request_id,
            client_id=request.client_id,
            capability=request.capability,
            input_sha256=hashlib.sha256(request.payload).hexdigest(),
            shape_bucket=request.shape.bucket,
            items=request.shape.items,
            trace_id=member.trace_id,
            input_type=request.input_type,
        ),
    )


def _dispatchable(ctx: ServingContext, run: _Run) -> list[_Member]:
    """The members the model runs for: each passes its own `before_dispatch` (one refused there,
    or whose client went away, fails alone)."""
    ready: list[_Member] = []
    for member in run.members:
        if not member.accepted:
            continue  # its client went away before the run was accepted
        try:
            if member.withdrawn:
                raise ServingError("REQUEST_CANCELLED", "the client disconnected before the request finished")
            member.before_dispatch()
        except Exception as refused:
            _fail(ctx, member, _failure(refused, member.request.request_id), refused)
            continue
        ready.append(member)
    return ready


def _fail(ctx: ServingContext, member: _Member, failure: ServingError, error: BaseException) -> None:
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
            **_identity(member),
            code=failure.code,
            http_status=failure.http_status,
            deployment_id=member.deployment.deployment_id,
            latency=latency,
        ),
    )
    _settle(member.outcome, error if cancelled(error) else failure)


class _Identity(TypedDict):
    request_id: str
    client_id: str
    capability: str
    trace_id: str


def _identity(member: _Member) -> _Identity:
    """What every event of `member` names it by."""
    request = member.request
    return _Identity(
        request_id=request.request_id,
        client_id=request.client_id,
        capability=request.capability,
        trace_id=member.trace_id,
    )


def _ended(ctx: ServingContext, member: _Member, event: RequestCompleted | RequestFailed) -> None:
    """`member`'s last event, recorded."""
    member.ended = True
    record_request(ctx, member.request.capability, member.request.request_id, event)


def _answer(
    ctx: ServingContext, run: _Run, grant: capacity.Grant, invoked: Invoked[Any], ready: list[_Member]
) -> None:
    """Each member answered with its own part of the output, and recorded; the lease goes back.
    A shared run's part of each member is a reply of its own, which its reader reads."""
    try:
        results = (
            split_output(
                invoked.result, [len(m.shared.texts) for m in ready if m.shared is not None], invoked.worker
            )
            if len(ready) > 1
            else [invoked.result]
        )
    except (ServingError, msgspec.DecodeError, msgspec.ValidationError) as unreadable:
        failure = _output_failure(unreadable)
        ctx.spawn(capacity.release(ctx, grant, "failed"))
        for member in ready:
            _fail(ctx, member, failure, failure)
        return
    served: list[tuple[_Member, Served[Any], Usage]] = []
    for member, result in zip(ready, results, strict=True):
        try:
            own = member.output.read(result)[0] if len(ready) > 1 else result
            served.append((member, *_served(grant, invoked, member, own, run.departed)))
        except ServingError as failure:
            _fail(ctx, member, failure, failure)
    ctx.spawn(capacity.release(ctx, grant, "completed" if served else "failed"))
    for member, answer, usage in served:
        _complete(ctx, member, grant, answer, usage)


def _output_failure(error: Exception) -> ServingError:
    if isinstance(error, ServingError):
        return error
    return ServingError("INVALID_OUTPUT", f"the worker's output could not be read ({type(error).__name__})")


def _served(
    grant: capacity.Grant, invoked: Invoked[Any], member: _Member, result: Any, departed: float
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


def _complete(
    ctx: ServingContext, member: _Member, grant: capacity.Grant, served: Served[Any], usage: Usage
) -> None:
    _ended(
        ctx,
        member,
        RequestCompleted(
            **_identity(member),
            deployment_id=grant.deployment_id,
            node_id=grant.node_id,
            accelerator_id=grant.accelerator_id,
            cold=grant.cold,
            latency=served.latency,
            usage=usage,
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


async def _lease(
    ctx: ServingContext,
    deployment: DeploymentState,
    first: ServeRequest,
    deadline: float,
    sharing: tuple[str, ...],
    avoid: str = "",
    taken: asyncio.Future[ServingError | None] | None = None,
) -> capacity.Grant:
    """A lease for a run: its first member's, naming the members `sharing` it too."""
    return await capacity.acquire(
        ctx, deployment, first.request_id, first.client_id, deadline, first.priority, avoid, taken, sharing
    )


async def _elsewhere(
    ctx: ServingContext,
    deployment: DeploymentState,
    first: ServeRequest,
    deadline: float,
    gone: str,
    lost: ServingError,
    sharing: tuple[str, ...],
) -> capacity.Grant:
    """A lease for the retry, anywhere but `gone`. An unreachable agent with no other accelerator
    to go to is answered as it was (CAPABILITY_UNAVAILABLE), not as a placement refusal."""
    try:
        return await _lease(ctx, deployment, first, deadline, sharing, avoid=gone)
    except ServingError as refused:
        if isinstance(lost, NodeUnreachable) and refused.code == "NO_ELIGIBLE_NODE":
            raise lost from None
        raise


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
