"""The upkeep loop: acts on `upkeep`'s decisions when the live view changes or a timer is due.

It waits on the live view's change notifications, with a timeout at the next keep-warm TTL or
lease expiry: no polling. A quarantine is such a change: the round after it unloads the idle
residents of the deployments it made unservable (`upkeep.unservable_idle`). Its unloads are
evictions on the accelerator's books, decided against its leases (`unloading.unload_idle`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from datetime import UTC, datetime
from functools import partial

from eventstore.errors import ConcurrencyConflict
from eventstore.store import ExpectedVersion
from gateway.scheduler import PlacementRequest, Verdict
from gateway.scheduler.placement import plan_placement
from gateway.scheduler.standby import is_standby
from gateway.serving import liveness, node_loss, replicas, upkeep
from gateway.serving.appends import append_to_accelerator, stage
from gateway.serving.context import ServingContext
from gateway.serving.envelopes import live_envelope
from gateway.serving.evicting import planned_eviction, unload_victims
from gateway.serving.loading import send_load
from gateway.serving.node_silence import read_through
from gateway.serving.standby import keep_standby, next_standby_due
from gateway.serving.unloading import unload_idle
from gateway.serving.vanished import fail_left_open, record_lease_timeout
from gateway.state.evictions import (
    evicting_for,
    evictions_ended,
    next_unload_due,
    unloads_overdue,
)
from gateway.state.loads import loads_overdue, next_load_due
from streams.codes import ServingError
from streams.envelope import new_id
from streams.events import control as c
from streams.events import serving as s
from streams.subjects import Aggregate

log = logging.getLogger("modelforge.gateway.upkeep")
IDLE_WAIT_S = 60.0  # nothing scheduled: look again after this long anyway
# Rounds start at least this far apart: every request changes the live view twice (its lease and
# its release), and a round per change took a tenth of a CPU-clock profile of the gateway at one
# client. Changes that come sooner wait out the gap and are decided together in one round.
ROUND_GAP_S = 0.1


async def run_upkeep(ctx: ServingContext, stop: asyncio.Event) -> None:
    live = ctx.live
    changed = asyncio.Event()  # set by the live view on every change; cheaper to wait on than its Condition
    live.listeners.append(changed.set)
    if ctx.standby is not None:  # a standby lease's first use since its grant: when to record it
        ctx.standby.on_first_use = changed.set
    stop_waiting = asyncio.ensure_future(stop.wait())
    stop_waiting.add_done_callback(lambda _: changed.set())
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        began = loop.time()
        changed.clear()
        try:
            await upkeep_once(ctx)
        except (ServingError, ConcurrencyConflict) as exc:
            log.info("upkeep deferred: %s", exc)
        except Exception:
            log.exception("upkeep round failed")
        now = time.time()
        dues = [
            t
            for t in (
                upkeep.next_ttl_due(live.catalog, live.accelerators.values()),
                upkeep.next_lease_expiry(live.lease_grants),
                upkeep.next_warm_retry(live.catalog, live.load_failures, now),
                replicas.next_idle_extra_due(live.catalog, live.accelerators.values(), live.policy),
                upkeep.next_pressure_due(ctx.pressure, live.policy),
                next_standby_due(ctx),
                next_load_due(live.loads, live.policy.load_timeout_seconds),
                next_unload_due(live.evictions, live.policy.unload_timeout_seconds),
                node_loss.next_node_loss_due(
                    live.catalog, live.accelerators, live.telemetry.values(), live.feed
                ),
                node_loss.next_ask_due(
                    live.catalog, live.accelerators, live.telemetry.values(), live.feed, ctx.liveness_asked
                ),
            )
            if t is not None
        ]
        wait = max(0.05, min(dues) - now) if dues else IDLE_WAIT_S
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(min(wait, IDLE_WAIT_S)):
                await changed.wait()
        with contextlib.suppress(TimeoutError):  # the gap, unless stopped meanwhile
            async with asyncio.timeout_at(began + ROUND_GAP_S):
                await stop.wait()
    live.listeners.remove(changed.set)
    stop_waiting.cancel()


async def upkeep_once(ctx: ServingContext, now: float | None = None) -> None:
    """One round, as of `now` (the clock's time unless given)."""
    live, now = ctx.live, time.time() if now is None else now
    for grant in upkeep.expired(live.accelerators, live.lease_grants, now):
        expiry = s.LeaseExpired(lease_id=grant.lease_id, accelerator_id=grant.accelerator_id)
        await append_to_accelerator(ctx, grant.accelerator_id, [expiry])
        log.info("lease %s on %s expired", grant.lease_id, grant.accelerator_id)
        await _record_lease_timeout(ctx, grant)
    await _declare_lost_nodes(ctx, time.time())  # telemetry ages on the wall clock, whatever `now` is
    await _record_refused_forgeries(ctx)
    # Transitions nobody finished (a lost job, a stuck agent) and evictions that have ended. Every
    # replica books them; whoever is second gets a conflict, and the next round sees them done.
    policy = live.policy
    due: list[s.ResidencyLoadFailed | s.ResidencyUnloadFailed | s.EvictionCompleted] = [
        *loads_overdue(live.loads, now, policy.load_timeout_seconds),
        *unloads_overdue(live.evictions, live.accelerators, now, policy.unload_timeout_seconds),
        *evictions_ended(live.evictions, live.accelerators),
    ]
    for event in due:
        with contextlib.suppress(ConcurrencyConflict):
            await append_to_accelerator(ctx, event.accelerator_id, [event])
            log.info("%s on %s: %s", type(event).__name__, event.accelerator_id, event)
    # Residents idle past their keep-warm TTL, idle residents whose files may not be served any
    # more, and idle residents unloaded to bring books a measurement put over capacity back within
    # it (one unload for a resident that is several), each an eviction on its accelerator's books:
    # a lease granted meanwhile, or another replica's eviction of it, makes the append conflict,
    # and the next round sees the copy busy or UNLOADING.
    unservable = upkeep.unservable_idle(live.catalog, live.accelerators.values())
    over = [u for u in upkeep.over_capacity(live.accelerators.values(), policy) if u not in unservable]
    ttl = upkeep.idle_past_ttl(live.catalog, live.accelerators.values(), now)
    extras = replicas.idle_extras(live.catalog, live.accelerators.values(), policy, now)
    unloads = [
        *[(u, "artifact_set_unservable") for u in unservable],
        *[(u, "over_capacity") for u in over],
        *[(u, "keep_warm_ttl") for u in ttl if u not in unservable and u not in over],
        *[(u, "replica_idle") for u in extras if u not in unservable and u not in over and u not in ttl],
    ]
    for u, reason in unloads:
        if await unload_idle(ctx, u.node_id, u.accelerator_id, u.deployment_id, reason):
            log.info("unloading %s from %s: %s", u.deployment_id, u.accelerator_id, reason)
    schedulable = live.schedulable_accelerators(now)
    for deployment_id in upkeep.warm_missing(live.catalog, schedulable, live.load_failures, now):
        warm = live.catalog.deployments[deployment_id].residency.kind == "always_warm"
        await _load_copy(ctx, deployment_id, "always_warm" if warm else "replica_min", may_evict=True)
    waiting = Counter(place.deployment_id for place in ctx.waiting)
    for deployment_id in replicas.wanting_more(live.catalog, schedulable, policy, waiting):
        await _load_copy(ctx, deployment_id, "replica_scale_up", may_evict=False)
    ctx.pressure, steps = upkeep.track_pressure(schedulable, ctx.pressure, live.policy, now)
    for step in steps:
        changed = s.PressureChanged(
            accelerator_id=step.accelerator_id,
            previous=step.previous.value,
            current=step.current.value,
            utilization=round(step.utilisation, 4),
        )
        await append_to_accelerator(ctx, step.accelerator_id, [changed])
        log.info("pressure on %s: %s -> %s", step.accelerator_id, step.previous, step.current)
    await keep_standby(ctx, now)  # last: on the residents and pressure this round left


async def _record_refused_forgeries(ctx: ServingContext) -> None:
    """Record each message the live view refused as forged on its sender's node aggregate (every
    replica that refused it and had not seen it recorded yet: each says it refused it)."""
    for key, refused in list(ctx.live.forged.items()):
        await ctx.store.append(
            Aggregate.NODE, refused.node_id, [refused], ExpectedVersion.ANY, actor=ctx.actor
        )
        ctx.live.forged.pop(key, None)


async def _declare_lost_nodes(ctx: ServingContext, now: float) -> None:
    """Declare gone workers lost (one replica's append wins): those the rules judge lost (silent too
    long, stopped, revoked) and those whose connection is gone (`liveness`); and reconcile the
    accelerators of lost nodes to cold, which ends their leases: in-flight invokes to them fail at
    once."""
    live = ctx.live
    gone = await liveness.gone_nodes(ctx, now)
    silent = node_loss.nodes_lost(live.catalog, live.accelerators, live.telemetry.values(), now, live.feed)
    if silent:  # silent to this replica: what did the nodes publish? (`node_silence`)
        read = await read_through(ctx, silent)
        silent = (
            node_loss.nodes_lost(live.catalog, live.accelerators, live.telemetry.values(), now, live.feed)
            if read
            else []
        )
    judged = {lost.node_id for lost in silent}  # (the rule's reason, where both hold: revoked, stopped)
    for lost in [*silent, *(lost for lost in gone if lost.node_id not in judged)]:
        if not node_loss.still_to_declare(live.catalog, lost):
            continue  # declared by another replica while this one asked (its version is the new one)
        seen = datetime.fromtimestamp(lost.last_seen, UTC) if lost.last_seen is not None else None
        event = c.NodeLost(
            node_id=lost.node_id, generation=lost.generation, last_seen_at=seen, reason=lost.reason
        )
        expected = live.node_versions.get(lost.node_id) or ExpectedVersion.NO_STREAM
        with contextlib.suppress(ConcurrencyConflict):
            await ctx.store.append(Aggregate.NODE, lost.node_id, [event], expected, actor=ctx.actor)
            log.warning("node %s (generation %d) lost: %s", lost.node_id, lost.generation, lost.reason)
    for reconciled in node_loss.reconcile_lost(live.catalog, live.accelerators):
        with contextlib.suppress(ConcurrencyConflict):
            await append_to_accelerator(ctx, reconciled.accelerator_id, [reconciled])
            log.info("%s reconciled to cold: its node was lost", reconciled.accelerator_id)


async def _record_lease_timeout(ctx: ServingContext, grant: s.LeaseGranted) -> None:
    """The request that held an expired lease, or, for another replica's standby lease, every
    request that replica left open (`gateway.serving.vanished`: off the round, which must not wait
    for the read model to catch up)."""
    if is_standby(grant.lease_id):
        ctx.spawn(fail_left_open(ctx, grant))
        return
    deployment = ctx.live.catalog.deployments.get(grant.deployment_id)
    if deployment is None or not grant.request_id:
        return
    await record_lease_timeout(
        ctx, grant.request_id, grant.client_id, deployment.capability, grant.deployment_id
    )


async def _load_copy(ctx: ServingContext, deployment_id: str, reason: str, may_evict: bool) -> None:
    """Load a further copy of a deployment where none is (a node without one first), evicting idle
    residents that may be evicted (on-demand or keep-warm) if that is what it takes and `may_evict`
    (a copy the deployment must keep); a round after the eviction has ended loads it."""
    live = ctx.live
    if evicting_for(live.evictions, deployment_id):
        return  # room is being made: deciding again now would evict more than needed
    deployment = live.catalog.deployments[deployment_id]
    envelope, _ = live_envelope(live, deployment)
    async with live.decision_lock:
        now = time.time()
        decision = plan_placement(
            upkeep.with_tracked_pressure(live.schedulable_accelerators(now), ctx.pressure),
            envelope,
            PlacementRequest(channel=envelope.channel, new_replica=True),
            live.policy,
            now,
            live.co_residency,
        )
        acc = decision.accelerator_id
        evicts = may_evict and decision.verdict is Verdict.ADMIT_AFTER_EVICTION
        if evicts and decision.evictions and acc is not None:
            eviction = planned_eviction(decision, acc, deployment_id)
            done = stage(ctx, acc, [eviction])
            send = partial(unload_victims, ctx, decision.node_id or "", eviction)
            log.info("evicting %s to load %s (%s)", ", ".join(eviction.victims), deployment_id, reason)
        elif decision.verdict is Verdict.ADMIT and acc is not None:
            load = s.ResidencyLoadRequested(
                load_id=new_id(),
                accelerator_id=acc,
                node_id=decision.node_id or "",
                deployment_id=deployment_id,
                required_bytes=decision.load_bytes,
                reason=reason,
            )
            done = stage(ctx, acc, [load])
            send = partial(send_load, ctx, load, deployment)
        else:
            # Under queue pressure with no room, every round asks again: not worth a line each time.
            say = log.debug if reason == "replica_scale_up" else log.info
            say(
                "%s copy of %s not placed yet: %s %s",
                reason,
                deployment_id,
                decision.verdict.value,
                [r.value for r in decision.reason_codes],
            )
            return
    await done
    await send()
