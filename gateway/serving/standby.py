"""Standby leases at the I/O edge: the upkeep books, renews and lets go this replica's standby
leases as ordinary lease events (`keep_standby`); a warm request takes a free slot of one instead
of appending a lease (`take_standby`), and one whose lease cannot be appended because MF_EVENTS
has no leader waits for a slot (`standby_instead`). What to hold and the slots' accounting are
`gateway.scheduler.standby`'s.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial

from gateway.scheduler import ResidencyState
from gateway.scheduler.accounting import required_bytes
from gateway.scheduler.standby import (
    Held,
    StandbySlots,
    Wanted,
    holder_of,
    is_standby,
    plan_standby,
    standby_lease_id,
)
from gateway.serving.appends import stage
from gateway.serving.context import ServingContext
from gateway.serving.envelopes import live_envelope
from gateway.serving.upkeep import with_tracked_pressure
from streams.envelope import new_id
from streams.events import serving as s
from streams.events.base import Event

log = logging.getLogger("modelforge.gateway.standby")
RENEW_FRACTION = 3  # a standby lease is renewed once less than a third of its TTL is left
# A warm lease's append not acknowledged after this long (healthy: milliseconds) may have gone to
# an MF_EVENTS leader that was lost with it: the store asks the stream whether it has one
# (`EventStore.probe_leader`), and again each time as long, while the request holds on.
PROBE_AFTER_S = 0.5
# A request run under a slot appends no lease: its resident's use reaches the books with the
# lease's next renewal, which comes this long after the lease was granted once a slot is used
# (sooner for a shorter keep-warm TTL, never more often than MIN_RECORD_USE_S).
RECORD_USE_S, MIN_RECORD_USE_S = 10.0, 0.5


def take_standby(ctx: ServingContext, deployment_id: str, avoid: str = "") -> Held | None:
    """A slot of one of this replica's standby leases for the deployment, on an accelerator where it
    is still loaded and may be served (not `avoid`), or None."""
    if ctx.standby is None:
        return None
    return ctx.standby.take(deployment_id, avoid, lambda held: _servable(ctx, held), time.time())


def _servable(ctx: ServingContext, held: Held) -> bool:
    """Whether a request may run under `held` now: as placement would place one there (its node
    enabled and live, the deployment loaded there), on a lease still on the books. The upkeep lets
    a lease go once it stops qualifying; until its release lands, no request takes it."""
    live = ctx.live
    state = live.view(held.accelerator_id)
    if state is None or not live.holds_lease(held.accelerator_id, held.lease_id):
        return False
    node = live.catalog.nodes.get(state.node_id)
    if node is None or not node.schedulable or not live.node_live(node.node_id):
        return False
    return any(
        r.deployment_id == held.deployment_id and r.state is ResidencyState.LOADED for r in state.residents
    )


def give_back(ctx: ServingContext, standby_lease_id: str) -> None:
    if ctx.standby is not None:
        ctx.standby.give_back(standby_lease_id)


async def standby_instead(
    ctx: ServingContext,
    landed: asyncio.Future[int],
    deployment_id: str,
    avoid: str,
    deadline: float,
    without_it: Callable[[], None],
) -> Held | None:
    """While a warm lease's append is in flight: a standby slot if MF_EVENTS is found leaderless
    before it lands (the request then runs without its own lease), else None (wait as before): every
    slot taken, the first given back. It does not wait at all where this replica holds no standby
    lease for the deployment. `without_it` is
    called when the request will not wait for the lease (a slot taken, or cancelled meanwhile): it
    sees to the lease once it lands."""
    try:
        held = await _slot_first(ctx, landed, deployment_id, avoid, deadline)
    except asyncio.CancelledError:
        without_it()
        raise
    if held is not None:
        without_it()
    return held


async def _slot_first(
    ctx: ServingContext, landed: asyncio.Future[int], deployment_id: str, avoid: str, deadline: float
) -> Held | None:
    """A slot once MF_EVENTS is found leaderless (and, every slot taken, once one is given back),
    unless the lease lands first or the deadline passes (None)."""
    slots = ctx.standby
    if slots is None or landed.done() or not slots.holds(deployment_id):
        return None
    loop = asyncio.get_running_loop()
    event: asyncio.Future[object] = asyncio.ensure_future(ctx.store.leaderless.wait())
    try:
        while True:
            waits: set[asyncio.Future[object]] = {landed, event}  # type: ignore[arg-type]
            left = deadline - time.time()
            if left <= 0:
                return None
            if not ctx.store.leaderless.is_set():
                done, _ = await asyncio.wait(
                    waits, timeout=min(left, PROBE_AFTER_S), return_when=asyncio.FIRST_COMPLETED
                )
                if not done:
                    ctx.store.probe_leader()  # taking long: is there still a leader to answer it?
                    continue
            else:
                await asyncio.wait(waits, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            if landed.done() or not ctx.store.leaderless.is_set():
                return None
            held = take_standby(ctx, deployment_id, avoid)
            if held is not None or not slots.holds(deployment_id):
                return held
            event.cancel()
            event = loop.create_future()  # every slot taken: wait for one to be given back
            slots.on_free(partial(_wake, event))
    finally:
        event.cancel()


def _wake(waiter: asyncio.Future[object]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def next_standby_due(ctx: ServingContext) -> float | None:
    """When the first of this replica's standby leases is due for renewal, before it expires or to
    record its slots' use (None: none held)."""
    slots = ctx.standby
    if slots is None or not slots.held:
        return None
    within, record_use_s = ctx.lease_ttl_s / RENEW_FRACTION, _record_use_s(ctx)
    return min(
        min(held.expires_at - within, held.granted_at + record_use_s)
        if held.lease_id in slots.unrecorded_use
        else held.expires_at - within
        for held in slots.held.values()
    )


def _record_use_s(ctx: ServingContext) -> float:
    """How long a standby lease's uses may stay off the books: `RECORD_USE_S`, or less where a
    keep-warm TTL or the idle time of an extra replica is shorter, so that no resident in use
    looks idle for that long."""
    deployments = ctx.live.catalog.deployments.values()
    idle_limits = [ctx.live.policy.replica_idle_seconds, *(d.residency.keep_warm_ttl_s for d in deployments)]
    return max(MIN_RECORD_USE_S, min([RECORD_USE_S, *(t / 2 for t in idle_limits if t > 0)]))


async def keep_standby(ctx: ServingContext, now: float) -> None:
    """Book, renew and let go this replica's standby leases as `plan_standby` says: each change an
    append on its accelerator with the expected version (a conflict: the next round decides again)."""
    slots, live = ctx.standby, ctx.live
    if slots is None:
        return
    _sync(ctx, slots)
    per_request: dict[str, int] = {}
    for deployment_id in {r.deployment_id for state in live.accelerators.values() for r in state.residents}:
        deployment = live.catalog.deployments.get(deployment_id)
        if deployment is not None:
            envelope, _ = live_envelope(live, deployment)
            per_request[deployment_id] = required_bytes(envelope, True, live.policy)
    changes: list[tuple[asyncio.Future[int], Held | None, Held | None]] = []
    async with live.decision_lock:
        accelerators = with_tracked_pressure(live.schedulable_accelerators(now), ctx.pressure)
        within = ctx.lease_ttl_s / RENEW_FRACTION
        plan = plan_standby(
            accelerators,
            per_request,
            list(slots.held.values()),
            slots.in_use,
            slots.slots,
            live.policy,
            now,
            within,
            slots.unrecorded_use,
            _record_use_s(ctx),
        )
        for wanted in plan.book:
            grant, booked = _grant(ctx, wanted, now)
            changes.append((stage(ctx, wanted.accelerator_id, [grant]), booked, None))
        for renewed, wanted in plan.renew:
            grant, successor = _grant(ctx, wanted, now)
            live.lease_watches.follow(renewed.lease_id, grant.lease_id)  # requests under its slots
            events: list[Event] = [grant, _released(renewed)]
            changes.append((stage(ctx, wanted.accelerator_id, events), successor, renewed))
        for gone in plan.release:
            changes.append((stage(ctx, gone.accelerator_id, [_released(gone)]), None, gone))
    for done, new, old in changes:
        try:
            await done
        except Exception as failure:  # a conflict or the store failing: the next round decides again
            log.info("standby lease change deferred: %r", failure)
            continue
        if new is not None and old is not None:
            slots.renewed(old.lease_id, new)
        elif new is not None:
            slots.hold(new)
        elif old is not None:
            slots.drop(old.lease_id)


def _sync(ctx: ServingContext, slots: StandbySlots) -> None:
    """Forget held leases no longer on the books (expired, or ended with their node); adopt this
    replica's standby leases it does not know (written before it restarted)."""
    grants = ctx.live.lease_grants
    for lease_id in [lease_id for lease_id in slots.held if lease_id not in grants]:
        slots.drop(lease_id)
    mine = holder_of(ctx.gateway_id)
    for lease_id, grant in grants.items():
        if is_standby(lease_id) and grant.client_id == mine and lease_id not in slots.held:
            state = ctx.live.accelerators.get(grant.accelerator_id)
            slots.hold(_held(grant, state.node_id if state is not None else ""))


def _held(grant: s.LeaseGranted, node_id: str, granted_at: float = 0.0) -> Held:
    return Held(
        lease_id=grant.lease_id,
        accelerator_id=grant.accelerator_id,
        node_id=node_id,
        deployment_id=grant.deployment_id,
        reserved_bytes=grant.reserved_bytes,
        expires_at=grant.expires_at.timestamp(),
        granted_at=granted_at,
    )


def _grant(ctx: ServingContext, wanted: Wanted, now: float) -> tuple[s.LeaseGranted, Held]:
    expires = now + ctx.lease_ttl_s
    grant = s.LeaseGranted(
        lease_id=standby_lease_id(new_id()),
        accelerator_id=wanted.accelerator_id,
        deployment_id=wanted.deployment_id,
        request_id="",  # no request: a lease that expires unrenewed fails none (`keeper`)
        client_id=holder_of(ctx.gateway_id),
        reserved_bytes=wanted.reserved_bytes,
        expires_at=datetime.fromtimestamp(expires, UTC),
        decision_fingerprint="standby",
        used_at=None if wanted.used_at is None else datetime.fromtimestamp(wanted.used_at, UTC),
    )
    return grant, _held(grant, wanted.node_id, now)


def _released(held: Held) -> s.LeaseReleased:
    return s.LeaseReleased(lease_id=held.lease_id, accelerator_id=held.accelerator_id, outcome="completed")
