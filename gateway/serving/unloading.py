"""An operator's unload (drain or unload) goes through the accelerator aggregate as an eviction
does: an `EvictionPlanned` of the one deployment (reason "operator" or "drain"), decided against
the accelerator's leases and appended with its expected version. A lease another replica granted
meanwhile makes the append conflict, and the unload is decided again on a view that holds it;
once the eviction lands the deployment is UNLOADING there, so requests for it wait instead of
running into the unload, and the eviction ends (completed, failed or overdue) as any other does.

The upkeep's unloads (a keep-warm TTL, files that may not be served) go the same way
(`unload_idle`), without waiting: a lease granted meanwhile means the copy is not idle any more.
With several gateway replicas, only one replica's eviction lands; the others conflict, and their
next round sees the copy UNLOADING, so they neither send a second unload nor decide again.

None of these makes room for a model: the eviction cooldown, which spaces placement's evictions
against thrashing, neither holds them back nor starts with them (`gateway.state.accelerators`).
"""

from __future__ import annotations

import time

from eventstore.errors import ConcurrencyConflict
from gateway.scheduler import AcceleratorState, ResidencyState
from gateway.scheduler.state import is_standby
from gateway.serving.appends import catch_up_after, stage
from gateway.serving.context import ServingContext
from gateway.serving.evicting import unload_victims
from streams.codes import ServingError
from streams.envelope import new_id
from streams.events import serving as s

CATCH_UP_S = 10.0


def leases_of(state: AcceleratorState | None, deployment_id: str) -> int:
    """Leases of the deployment on the accelerator: its requests, and a load's reservation (not a
    replica's standby lease, which its holder lets go once the unload lands: `scheduler.standby`)."""
    if state is None:
        return 0
    return sum(
        1 for lease in state.leases if lease.deployment_id == deployment_id and not is_standby(lease.lease_id)
    )


def residence(ctx: ServingContext, deployment_id: str, on: str | None = None) -> tuple[str, str] | None:
    """(node, accelerator) holding the deployment in the view decisions see, if any (on the
    accelerator `on` alone, when given)."""
    for accelerator_id in ctx.live.accelerators if on is None else (on,):
        state = ctx.live.view(accelerator_id)
        if state is not None and any(r.deployment_id == deployment_id for r in state.residents):
            return state.node_id, accelerator_id
    return None


def decide_unload(state: AcceleratorState, deployment_id: str, reason: str) -> s.EvictionPlanned | None:
    """The eviction of `deployment_id` alone, or None while a lease of it is held."""
    if leases_of(state, deployment_id):
        return None
    return s.EvictionPlanned(
        eviction_id=new_id(),
        accelerator_id=state.accelerator_id,
        victims=(deployment_id,),
        for_deployment_id="",
        required_bytes=0,
        decision_fingerprint="",
        reason=reason,
    )


def busy(active: int) -> ServingError:
    return ServingError(
        "DEPLOYMENT_BUSY", f"{active} requests are running", details={"active_requests": active}
    )


async def plan_unload(
    ctx: ServingContext, deployment_id: str, reason: str, wait_s: float, on: str | None = None
) -> tuple[str, s.EvictionPlanned, int] | None:
    """Put the deployment's unload on the books of the accelerator holding it (`on`, when given):
    (node, the eviction, the version it left), or None when it is not resident. While leases of
    it are held, waits up to `wait_s` for them to end (0: not at all), then refuses DEPLOYMENT_BUSY."""
    give_up = time.monotonic() + wait_s
    while True:
        async with ctx.live.decision_lock:
            held = residence(ctx, deployment_id, on)
            if held is None:
                return None
            node_id, accelerator_id = held
            state = ctx.live.view(accelerator_id)
            assert state is not None
            eviction = decide_unload(state, deployment_id, reason)
            done = stage(ctx, accelerator_id, [eviction]) if eviction is not None else None
        if eviction is None or done is None:
            if not await _leases_ended(ctx, accelerator_id, deployment_id, give_up - time.monotonic()):
                raise busy(leases_of(ctx.live.view(accelerator_id), deployment_id))
            continue
        try:
            return node_id, eviction, await done
        except ConcurrencyConflict as clash:  # another writer came first: decide again on its events
            await catch_up_after(ctx, clash, CATCH_UP_S)


async def unload_idle(
    ctx: ServingContext, node_id: str, accelerator_id: str, deployment_id: str, reason: str
) -> bool:
    """Unload an idle loaded copy through the accelerator aggregate: whether its eviction landed
    (and its unload job was sent). Not when the view no longer holds it loaded and idle, nor when
    another writer came first (a lease granted, another replica's eviction of it): this round's
    view was stale, and the next one decides on the events that made it so."""
    async with ctx.live.decision_lock:
        state = ctx.live.view(accelerator_id)
        loaded = state is not None and any(
            r.deployment_id == deployment_id and r.state is ResidencyState.LOADED for r in state.residents
        )
        eviction = decide_unload(state, deployment_id, reason) if state is not None and loaded else None
        if eviction is None:
            return False
        done = stage(ctx, accelerator_id, [eviction])
    try:
        await done
    except ConcurrencyConflict as clash:
        await catch_up_after(ctx, clash, CATCH_UP_S)
        return False
    await unload_victims(ctx, node_id, eviction)
    return True


async def _leases_ended(ctx: ServingContext, accelerator_id: str, deployment_id: str, timeout: float) -> bool:
    """Whether the deployment's leases on the accelerator end within `timeout` (released, expired)."""
    if timeout <= 0:
        return False
    return await ctx.live.wait_for(
        lambda: leases_of(ctx.live.view(accelerator_id), deployment_id) == 0, timeout
    )
