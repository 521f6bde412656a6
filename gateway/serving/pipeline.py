"""A run of requests end to end: get capacity (while the client's limits settle), accept, invoke,
release, record — with its timings.

A run is one request, or several of one deployment that share one lease and one invoke
(`gateway.serving.coalescing` forms the groups, `gateway.serving.shared_runs` joins their texts and
cuts the output back); each member is accepted, refused, answered and recorded as itself
(`gateway.serving.members`). What the edge hands over and gets back is `gateway.serving.requests`.

Request events (MF_REQUESTS) and the lease release are written off the response's path: the
client gets its answer as soon as the model replies; every path releases the lease and records
how the request ended.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from gateway.deployments.model import DeploymentState
from gateway.deployments.weights import RoutingKey
from gateway.serving import capacity
from gateway.serving.coalescing import Room
from gateway.serving.context import ServingContext
from gateway.serving.dispatch import (
    ENVELOPE_BYTES,
    NODE_LOST,
    InvokeCutOff,
    Invoked,
    NodeUnreachable,
    invoke,
)
from gateway.serving.members import (
    Member,
    Run,
    accept,
    answer_of,
    complete,
    dispatchable,
    fail,
    failure_of,
    output_failure,
    settle,
)
from gateway.serving.outputs import JSON_OUTPUT, Output, OutputReader
from gateway.serving.requests import Served, ServeRequest, cancelled, record_rejection
from gateway.serving.shared_runs import Shareable, joint_input, shareable, split_output
from streams.codes import ServingError
from streams.contracts import EMBEDDING
from streams.events.requests import Usage

log = logging.getLogger("modelforge.gateway.pipeline")


async def _give_back(ctx: ServingContext, seeking: asyncio.Future[capacity.Grant]) -> None:
    """A refused request's capacity search stops (leaving the queue if it waits there; a lease
    it was appending is given back once it lands); a lease it already got is given back here."""
    seeking.cancel()
    await asyncio.wait([seeking])  # (raises only if this task itself is cancelled)
    if not seeking.cancelled() and seeking.exception() is None:
        await capacity.release(ctx, seeking.result(), "cancelled")


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
    member = Member(request, deployment, output, render, before_dispatch)
    deployment_id, coalescing = deployment.deployment_id, ctx.coalescing
    if coalescing.busy(deployment_id):
        shared = shareable(capability, deployment_id, request.payload, request.input_type, request.priority)
        if shared is not None:
            await admitted()  # a request its limits refuse never joins a group
            if coalescing.busy(deployment_id):
                return await _in_group(ctx, member, shared)
    coalescing.started(deployment_id)
    await _serve_run(ctx, Run([member]), admitted)
    return member.outcome.result()


async def _in_group(ctx: ServingContext, member: Member, shared: Shareable) -> Served[Any]:
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
            accept(ctx, member)  # it waited, as one in the capacity queue does
            late = ServingError("REQUEST_TIMEOUT", "no run to share began before the deadline")
            fail(ctx, member, late, late)
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


def _depart(ctx: ServingContext, members: list[Member]) -> None:
    run = Run(members)
    run.task = ctx.spawn(_serve_run(ctx, run, _settled), context=members[0].context)


async def _serve_run(ctx: ServingContext, run: Run, admitted: Callable[[], Awaitable[None]]) -> None:
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
    ctx: ServingContext, run: Run, admitted: Callable[[], Awaitable[None]]
) -> tuple[capacity.Grant, Invoked[Any], list[Member]] | None:
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
            settle(member.outcome, error)
        if cancelled(error):
            raise
        return None
    for member in members:
        if not member.withdrawn:
            accept(ctx, member)
    grant: capacity.Grant | None = None
    try:
        grant = await seeking
        ready = dispatchable(ctx, run)
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
            if isinstance(lost, NodeUnreachable) or grant.standby_lease_id:  # (a slot: given back)
                ctx.spawn(capacity.release(ctx, grant, "failed"))
            elif grant.run_slot is not None:  # the lease went with its node; its run slot goes now
                ctx.spawn(grant.run_slot.release())
            gone, under_slot, grant = grant.accelerator_id, bool(grant.standby_lease_id), None
            grant = await _elsewhere(ctx, deployment, first, deadline, gone, lost, sharing, under_slot)
            invoked = await invoke(
                ctx, grant, first.capability, request_id, payload, deadline, reader, first.input_type
            )
        return grant, invoked, ready
    except BaseException as error:
        if grant is None and seeking.done() and not seeking.cancelled() and seeking.exception() is None:
            grant = seeking.result()  # cancelled just as its lease was granted: still ours to give back
        if grant is not None:
            ctx.spawn(capacity.release(ctx, grant, "cancelled" if cancelled(error) else "failed"))
        failure = failure_of(error, first.request_id)
        for member in members:
            if member.accepted and not member.ended:
                fail(ctx, member, failure, error)
        if cancelled(error):
            raise
        return None


def _answer(
    ctx: ServingContext, run: Run, grant: capacity.Grant, invoked: Invoked[Any], ready: list[Member]
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
        failure = output_failure(unreadable)
        ctx.spawn(capacity.release(ctx, grant, "failed"))
        for member in ready:
            fail(ctx, member, failure, failure)
        return
    served: list[tuple[Member, Served[Any], Usage]] = []
    for member, result in zip(ready, results, strict=True):
        try:
            own = member.output.read(result)[0] if len(ready) > 1 else result
            served.append((member, *answer_of(grant, invoked, member, own, run.departed)))
        except ServingError as failure:
            fail(ctx, member, failure, failure)
    ctx.spawn(capacity.release(ctx, grant, "completed" if served else "failed"))
    for member, answer, usage in served:
        complete(ctx, member, grant, answer, usage)


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
    under_slot: bool = False,
) -> capacity.Grant:
    """A lease for the retry, anywhere but `gone`, where another accelerator may take it. An invoke
    cut off by a dropped NATS connection (`InvokeCutOff`) found its agent alive, and the agent that
    reported the drop is connected again: with no other copy to go to, it runs again on the same
    one. So does one that ran under a standby slot (`under_slot`) and found nobody taking its
    deployment's invokes: its resident may have begun to unload there (no lease of its own kept
    it busy), and placement decides afresh what serves it. Any other unreachable agent with no
    other accelerator to go to is answered as it was (CAPABILITY_UNAVAILABLE), not as a placement
    refusal."""
    try:
        return await _lease(ctx, deployment, first, deadline, sharing, avoid=gone)
    except ServingError as refused:
        if refused.code != "NO_ELIGIBLE_NODE" or not isinstance(lost, NodeUnreachable):
            raise
        if isinstance(lost, InvokeCutOff) or under_slot:
            return await _lease(ctx, deployment, first, deadline, sharing)
        raise lost from None
