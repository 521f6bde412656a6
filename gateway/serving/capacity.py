"""Getting VRAM for one request: decide, lease, load or evict, queue — until admitted or refused.

Each round takes a pure placement decision on the live view and turns it into events on the
chosen accelerator (with its expected version). Everything that takes time — a cold load, an
unload for eviction, waiting in the queue — happens outside the decision lock, waiting on the
live view's change notifications, bounded by the request's deadline.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime
from functools import partial

import msgspec

from eventstore.errors import ConcurrencyConflict, EventStoreError
from gateway.clients.permit import Permit
from gateway.deployments.model import DeploymentState
from gateway.scheduler import (
    ModelEnvelope,
    PlacementDecision,
    PlacementRequest,
    ReasonCode,
    Verdict,
)
from gateway.scheduler.placement import plan_placement
from gateway.scheduler.standby import Held
from gateway.serving.appends import catch_up_after, stage
from gateway.serving.background import NATS_FAILURES, append_until_recorded
from gateway.serving.context import ServingContext
from gateway.serving.envelopes import live_envelope
from gateway.serving.errors import rejection
from gateway.serving.evicting import planned_eviction, unload_victims
from gateway.serving.line import Place, note_blocked, waits_behind, yields
from gateway.serving.loading import await_evicted, await_loaded, send_load
from gateway.serving.refusal_log import note_refusal
from gateway.serving.standby import give_back, standby_instead, take_standby
from gateway.serving.upkeep import with_tracked_pressure
from gateway.state.loads import failed_recently
from streams.codes import ServingError
from streams.envelope import new_id
from streams.events import serving as s
from streams.tracing import span

log = logging.getLogger("modelforge.gateway.capacity")


class Grant(msgspec.Struct, kw_only=True):
    lease_id: str
    accelerator_id: str
    node_id: str
    deployment_id: str
    cold: bool
    fingerprint: str
    scheduling_ms: float = 0.0
    load_ms: float = 0.0
    queue_ms: float = 0.0
    run_slot: Permit | None = None  # the deployment's cap (gateway.serving.caps), let go after the lease
    # set when the request runs under a slot of this replica's standby lease (no lease of its own
    # appended), which its RequestCompleted names; `lease_id` is then the request's own
    standby_lease_id: str = ""


def _lease(
    decision: PlacementDecision, deployment_id: str, request_ids: list[str], client_id: str, ttl_s: float
) -> s.LeaseGranted:
    assert decision.accelerator_id is not None
    return s.LeaseGranted(
        lease_id=new_id(),
        accelerator_id=decision.accelerator_id,
        deployment_id=deployment_id,
        request_id=request_ids[0],
        request_ids=request_ids,
        client_id=client_id,
        reserved_bytes=decision.required_bytes,
        expires_at=datetime.fromtimestamp(time.time() + ttl_s, UTC),
        decision_fingerprint=decision.fingerprint,
    )


class _Step(msgspec.Struct):
    """A decision turned into staged events: what to wait for before the next step."""

    kind: str  # "warm" | "cold" | "evict"
    done: asyncio.Future[int]
    lease: s.LeaseGranted | None = None
    load: s.ResidencyLoadRequested | None = None
    eviction: s.EvictionPlanned | None = None


async def acquire(
    ctx: ServingContext,
    deployment: DeploymentState,
    request_id: str,
    client_id: str,
    deadline: float,
    priority: int = 0,
    avoid: str = "",
    taken: asyncio.Future[ServingError | None] | None = None,
    sharing: tuple[str, ...] = (),
) -> Grant:
    """A lease on an accelerator where `deployment` is loaded, or a ServingError. While it waits in
    line, a higher client `priority` is woken first when capacity frees up. `avoid`: an accelerator
    not to place it on (a retry's, whose node did not answer). `taken` is resolved once the
    deployment's caps have let the request run or wait (None), or its queue refused it. `sharing`:
    the requests that share the run with `request_id`, which its lease names too."""
    place = Place(deployment.deployment_id, priority)
    run_slot = None

    def heard(refusal: ServingError | None) -> None:
        if taken is not None and not taken.done():
            taken.set_result(refusal)

    try:
        with span("place", attributes={"modelforge.deployment_id": place.deployment_id}) as placing:
            if ctx.gate is not None:
                run_slot = await ctx.gate.enter(deployment, deadline, heard)
            heard(None)
            request_ids = [request_id, *sharing]
            grant = await _acquire(ctx, deployment, request_ids, client_id, deadline, place, avoid)
            grant.run_slot, run_slot = run_slot, None
            if placing.is_recording():
                placing.set_attributes(
                    {
                        "modelforge.node_id": grant.node_id,
                        "modelforge.accelerator_id": grant.accelerator_id,
                        "modelforge.cold": grant.cold,
                        "modelforge.lease_id": grant.lease_id,
                    }
                )
            return grant
    finally:
        heard(None)  # (failed before the caps decided: the search's own failure answers)
        if run_slot is not None:  # no lease came of it
            ctx.spawn(run_slot.release())
        if place in ctx.waiting:
            ctx.waiting.remove(place)
            ctx.queue_changed()
            ctx.wake_waiting()  # leaving the line may let the next one in


async def _acquire(
    ctx: ServingContext,
    deployment: DeploymentState,
    request_ids: list[str],
    client_id: str,
    deadline: float,
    place: Place,
    avoid: str = "",
) -> Grant:
    envelope, stale = live_envelope(ctx.live, deployment)
    spent = {"scheduling": 0.0, "load": 0.0, "queue": 0.0}
    queue_noted = False  # a request that waits is on the record once, at its first QUEUE verdict
    while True:
        now = time.time()
        if now >= deadline:
            raise ServingError("REQUEST_TIMEOUT", "no capacity became available before the deadline")
        # Room booked ahead: a free slot of this replica's standby lease runs the request with no
        # append of its own, unless a request of the deployment waits in line ahead of it (while
        # MF_EVENTS has no leader, when no append could land anyway, whatever the line).
        if (ctx.store.leaderless.is_set() or not waits_behind(ctx.waiting, place)) and (
            held := take_standby(ctx, deployment.deployment_id, avoid)
        ):
            return _standby_grant(ctx, held, spent)
        started = time.perf_counter()
        left_ms = (deadline - now) * 1000
        async with ctx.live.decision_lock:
            accelerators = with_tracked_pressure(ctx.live.schedulable_accelerators(now), ctx.pressure)
            decision = plan_placement(
                [a for a in accelerators if a.accelerator_id != avoid] if avoid else accelerators,
                envelope,
                PlacementRequest(
                    channel=envelope.channel,
                    deadline_ms=left_ms,
                    runtime_healthy=deployment.deployment_id not in ctx.live.unhealthy,
                    queue_depth=ctx.queue_depth(),  # every replica's line
                    queued=place in ctx.waiting,
                    load_failed_on=failed_recently(ctx.live.load_failures, deployment.deployment_id, now),
                ),
                ctx.live.policy,
                now,
                ctx.live.co_residency,
            )
            ctx.metrics.decided(decision)
            if decision.verdict.rejects or (decision.verdict is Verdict.QUEUE and not queue_noted):
                note_refusal(ctx, decision, deployment.deployment_id, request_ids[0])
                queue_noted = True
            behind = decision.verdict.admits and _behind(ctx, place, decision, now)
            step = (
                None if behind else _stage(ctx, decision, deployment, request_ids, client_id, stale, left_ms)
            )
            place.admitted = step is not None
        if place.admitted and place in ctx.waiting:
            ctx.wake_waiting(place.deployment_id)  # the next in line may take what this one left
        if step is None:  # QUEUE: wait for the view to change (a lease released, a load finished)
            note_blocked(place, decision, now, accelerators)
            spent["scheduling"] += (time.perf_counter() - started) * 1000
            waited = time.perf_counter()
            with span("queue", attributes={"modelforge.verdict": decision.verdict.value}):
                await _queue(ctx, place, deadline, _decide_again_by(decision, envelope, deadline))
            spent["queue"] += (time.perf_counter() - waited) * 1000
            continue
        try:
            with span("lease", attributes={"modelforge.verdict": decision.verdict.value}):  # the append
                if step.kind == "warm" and (
                    held := await standby_instead(
                        ctx,
                        step.done,
                        deployment.deployment_id,
                        avoid,
                        deadline,
                        partial(_finish_when_landed, ctx, step, deployment, decision.node_id or ""),
                    )
                ):
                    spent["scheduling"] += (time.perf_counter() - started) * 1000
                    return _standby_grant(ctx, held, spent)
                version = await _landed(ctx, step, deadline, deployment, decision.node_id or "")
        except ConcurrencyConflict as clash:
            place.admitted = False  # (it decides again, in its turn)
            spent["scheduling"] += (time.perf_counter() - started) * 1000
            await catch_up_after(ctx, clash, max(0.0, deadline - time.time()))
            continue
        except (EventStoreError, *NATS_FAILURES) as failure:
            raise ServingError(
                "CAPABILITY_UNAVAILABLE", f"could not record the placement: {failure}", http_status=503
            ) from None
        spent["scheduling"] += (time.perf_counter() - started) * 1000
        waited = time.perf_counter()
        if step.kind == "warm" and step.lease is not None:
            return _grant(step.lease, decision, deployment, cold=False, spent=spent)
        if step.kind == "cold" and step.lease is not None and step.load is not None:
            try:
                with span("load", attributes={"modelforge.node_id": decision.node_id or ""}):
                    await _send_jobs(ctx, step, deployment, decision.node_id or "")
                    await await_loaded(ctx, step.lease, deployment, deadline)
            except BaseException as error:  # the caller never gets this lease: give it back here
                outcome = "failed" if isinstance(error, Exception) else "cancelled"
                ctx.spawn(_release(ctx, step.lease.lease_id, step.lease.accelerator_id, outcome))
                raise
            spent["load"] += (time.perf_counter() - waited) * 1000
            return _grant(step.lease, decision, deployment, cold=True, spent=spent)
        if step.eviction is not None:
            with span("evict", attributes={"modelforge.node_id": decision.node_id or ""}):
                await _send_jobs(ctx, step, deployment, decision.node_id or "")
                await await_evicted(ctx, step.eviction, version, deadline)
            spent["load"] += (time.perf_counter() - waited) * 1000


def _behind(ctx: ServingContext, place: Place, decision: PlacementDecision, now: float) -> bool:
    """Whether a request that could be admitted waits its turn instead: behind those waiting for its
    model before it (or with a higher priority), or behind a request of another model whose turn it
    is on the chosen accelerator (`gateway.serving.line`)."""
    if waits_behind(ctx.waiting, place):
        return True
    acc = decision.accelerator_id
    return acc is not None and yields(ctx.waiting, place, acc, now, ctx.live.policy.fairness_window_seconds)


async def _landed(
    ctx: ServingContext, step: _Step, deadline: float, deployment: DeploymentState, node_id: str
) -> int:
    """The version the step's append left, waited for no longer than the request's deadline.
    Shielded: a request that stops waiting (cancelled, or out of time while NATS retries) does
    not stop the append; what it planned is then carried out without it (`_finish_when_landed`)."""
    limit = asyncio.timeout(max(0.0, deadline - time.time()))
    try:
        async with limit:
            return await asyncio.shield(step.done)
    except asyncio.CancelledError:
        _finish_when_landed(ctx, step, deployment, node_id)
        raise
    except TimeoutError:
        if not limit.expired():
            raise  # the append's own failure
        _finish_when_landed(ctx, step, deployment, node_id)
        raise ServingError("REQUEST_TIMEOUT", "the placement was not recorded before the deadline") from None


def _finish_when_landed(ctx: ServingContext, step: _Step, deployment: DeploymentState, node_id: str) -> None:
    """The request left while its decision was being appended. Once the append lands, what it
    put on the books goes ahead as planned: the load job or the eviction's unload jobs are sent
    (their senders book a failure themselves), and the request's own lease is given back."""

    async def finish() -> None:
        try:
            await step.done
        except Exception:
            return  # not appended: nothing was planned
        try:
            await _send_jobs(ctx, step, deployment, node_id)
        except ServingError:
            pass  # booked by its sender (ResidencyLoadFailed / ResidencyUnloadFailed)
        finally:
            if step.lease is not None:
                await _release(ctx, step.lease.lease_id, step.lease.accelerator_id, "cancelled")

    ctx.spawn(finish())


async def _send_jobs(ctx: ServingContext, step: _Step, deployment: DeploymentState, node_id: str) -> None:
    """The jobs a landed step put on the books: its load, or its eviction's unloads. Shielded and
    tracked: once planned, they all go out even if the request stops waiting. A job that cannot
    be sent is booked as failed by its sender, which then raises."""
    if step.load is not None:
        await asyncio.shield(ctx.spawn(send_load(ctx, step.load, deployment)))
    if step.eviction is not None:
        await asyncio.shield(ctx.spawn(unload_victims(ctx, node_id, step.eviction)))


def _stage(
    ctx: ServingContext,
    decision: PlacementDecision,
    deployment: DeploymentState,
    request_ids: list[str],
    client_id: str,
    stale: str | None,
    deadline_ms: float,
) -> _Step | None:
    """Turn a decision into staged events (under the decision lock). None means queue.
    `deadline_ms`: what is left of the request's deadline, which a refusal may name."""
    verdict, acc = decision.verdict, decision.accelerator_id
    if verdict.rejects:
        raise rejection(decision, deployment.deployment_id, stale or "", deadline_ms)
    if verdict is Verdict.QUEUE or acc is None:
        return None
    if verdict is Verdict.ADMIT_AFTER_EVICTION and decision.evictions:
        eviction = planned_eviction(decision, acc, deployment.deployment_id)
        return _Step("evict", stage(ctx, acc, [eviction], request_ids[0]), eviction=eviction)
    lease = _lease(decision, deployment.deployment_id, request_ids, client_id, ctx.lease_ttl_s)
    if not decision.cold_load:
        return _Step("warm", stage(ctx, acc, [lease], request_ids[0]), lease=lease)
    load = s.ResidencyLoadRequested(
        load_id=new_id(),
        accelerator_id=acc,
        node_id=decision.node_id or "",
        deployment_id=deployment.deployment_id,
        required_bytes=decision.load_bytes,
        reason="request",
    )
    # The request's own lease holds the execution floor; the load reservation holds the envelope.
    floor = msgspec.structs.replace(lease, reserved_bytes=decision.required_bytes - decision.load_bytes)
    return _Step("cold", stage(ctx, acc, [load, floor], request_ids[0]), lease=floor, load=load)


def _grant(
    lease: s.LeaseGranted,
    decision: PlacementDecision,
    deployment: DeploymentState,
    cold: bool,
    spent: dict[str, float],
) -> Grant:
    return Grant(
        lease_id=lease.lease_id,
        accelerator_id=lease.accelerator_id,
        node_id=decision.node_id or "",
        deployment_id=deployment.deployment_id,
        cold=cold,
        fingerprint=decision.fingerprint,
        scheduling_ms=spent["scheduling"],
        load_ms=spent["load"],
        queue_ms=spent["queue"],
    )


def _standby_grant(ctx: ServingContext, held: Held, spent: dict[str, float]) -> Grant:
    ctx.metrics.ran_under_standby(held.deployment_id)
    return Grant(
        lease_id=new_id(),  # the request's own (watched while it runs), on no books
        accelerator_id=held.accelerator_id,
        node_id=held.node_id,
        deployment_id=held.deployment_id,
        cold=False,
        fingerprint="standby",
        scheduling_ms=spent["scheduling"],
        load_ms=spent["load"],
        queue_ms=spent["queue"],
        standby_lease_id=held.lease_id,
    )


def _decide_again_by(decision: PlacementDecision, envelope: ModelEnvelope, deadline: float) -> float:
    """When a queued request must be decided again even if nothing wakes it: for one waiting out
    critical pressure (no news from the accelerator meanwhile), the moment that pressure could no
    longer fall and the load finish in time, where the scheduler refuses it PRESSURE_CRITICAL
    naming the deadline; for any other wait, its deadline."""
    if ReasonCode.PRESSURE_CRITICAL not in decision.reason_codes:
        return deadline
    return deadline - (decision.wait_ms + envelope.cold_load_ms) / 1000


async def _queue(ctx: ServingContext, place: Place, deadline: float, decide_by: float) -> None:
    """Wait in line (our place is kept across rounds) until woken (`ServingContext.wake_waiting`)
    with no one left that it waits behind, `decide_by` (then decide again) or the deadline. A
    request behind others of its deployment decides again only once the one ahead is admitted or
    leaves the line (a rejection that one hears, it hears next), or at `decide_by`."""
    if place not in ctx.waiting:
        ctx.waiting.append(place)
        ctx.queue_changed()
    try:
        async with asyncio.timeout(max(0.0, decide_by - time.time())):
            place.woken.clear()
            await place.woken.wait()
            while waits_behind(ctx.waiting, place):
                place.woken.clear()
                await place.woken.wait()
    except TimeoutError:
        if decide_by < deadline:
            return  # decided again: it is refused there if pressure has not begun to fall
        raise ServingError("REQUEST_TIMEOUT", "no capacity became available before the deadline") from None


async def release(ctx: ServingContext, grant: Grant, outcome: str) -> None:
    if grant.standby_lease_id:
        give_back(ctx, grant.standby_lease_id)  # a slot, not a lease: nothing to append
    else:
        await _release(ctx, grant.lease_id, grant.accelerator_id, outcome)
    if grant.run_slot is not None:  # after the lease: its cap then holds on the record too
        await grant.run_slot.release()


async def _release(ctx: ServingContext, lease_id: str, accelerator_id: str, outcome: str) -> None:
    """Give the lease back, retried until recorded or until the lease is off the books anyway
    (expired, or released with its node); only a closing gateway leaves it to the lease's TTL."""
    event = s.LeaseReleased(lease_id=lease_id, accelerator_id=accelerator_id, outcome=outcome)  # type: ignore[arg-type]
    await append_until_recorded(
        ctx, accelerator_id, [event], lambda: not ctx.live.holds_lease(accelerator_id, lease_id)
    )
