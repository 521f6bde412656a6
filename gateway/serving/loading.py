"""What a capacity decision waits on before its lease is usable: a cold load sent and finished,
an eviction's unloads ended. Waits are on the live view's changes, bounded by the deadline."""

from __future__ import annotations

import logging
import time

from gateway.deployments.model import DeploymentState
from gateway.scheduler import ResidencyState
from gateway.serving.background import NATS_FAILURES, append_until_recorded
from gateway.serving.context import ServingContext
from gateway.serving.jobs import publish_load
from gateway.state.evictions import unloads_pending
from streams.codes import ServingError
from streams.events import serving as s
from streams.events.base import Event

log = logging.getLogger("modelforge.gateway.loading")


async def record_failure(ctx: ServingContext, accelerator_id: str, events: list[Event]) -> None:
    """Put a job that could not be sent back on the books (retried until recorded: until then the
    upkeep's load timeout is all that would end such a load); the caller answers the failure."""
    await append_until_recorded(ctx, accelerator_id, events)


async def send_load(ctx: ServingContext, load: s.ResidencyLoadRequested, deployment: DeploymentState) -> None:
    """Send the load job; if it cannot be sent, end the load on the books (no agent will)."""
    try:
        await publish_load(ctx, load, deployment)
    except (ServingError, *NATS_FAILURES) as failure:
        refusal = (
            failure
            if isinstance(failure, ServingError)
            else ServingError(
                "CAPABILITY_UNAVAILABLE", f"the load job could not be sent: {failure!r}", http_status=503
            )
        )
        ended = s.ResidencyLoadFailed(
            load_id=load.load_id,
            accelerator_id=load.accelerator_id,
            deployment_id=load.deployment_id,
            code=refusal.code,
            detail=refusal.message,
        )
        await record_failure(ctx, load.accelerator_id, [ended])
        raise refusal from None


async def await_loaded(
    ctx: ServingContext, lease: s.LeaseGranted, deployment: DeploymentState, deadline: float
) -> None:
    acc, dep = lease.accelerator_id, deployment.deployment_id

    def settled() -> bool:
        state = ctx.live.accelerators.get(acc)
        resident = next((r for r in state.residents if r.deployment_id == dep), None) if state else None
        return resident is None or resident.state is ResidencyState.LOADED

    if not await ctx.live.wait_for(settled, max(0.0, deadline - time.time())):
        raise ServingError("REQUEST_TIMEOUT", f"{dep} did not finish loading before the deadline")
    state = ctx.live.accelerators.get(acc)
    if state is None or not any(r.deployment_id == dep for r in state.residents):
        last = ctx.live.load_failures.get(dep)
        detail = f": {last.failed.code} {last.failed.detail}" if last else ""
        raise ServingError("RESIDENCY_LOAD_FAILED", f"loading {dep} failed{detail}", http_status=503)


async def await_evicted(
    ctx: ServingContext, eviction: s.EvictionPlanned, version: int, deadline: float
) -> None:
    """Until every victim's unload has ended (the eviction itself folded in first)."""
    victims, acc = set(eviction.victims), eviction.accelerator_id

    def settled() -> bool:
        folded = ctx.live.versions.get(acc, 0) >= version
        return folded and not unloads_pending(ctx.live.accelerators.get(acc), victims)

    if not await ctx.live.wait_for(settled, max(0.0, deadline - time.time())):
        raise ServingError("REQUEST_TIMEOUT", "evicting idle models did not finish before the deadline")
    state = ctx.live.accelerators.get(acc)
    kept = sorted(r.deployment_id for r in state.residents if r.deployment_id in victims) if state else []
    if kept:  # their memory was not given back: evicting them again would fail the same way
        raise ServingError(
            "GPU_MEMORY_NOT_RECLAIMED", f"unloading {', '.join(kept)} did not give its memory back"
        )
