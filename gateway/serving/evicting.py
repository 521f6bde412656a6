"""An eviction's I/O: its `EvictionPlanned` event from a placement decision, and its victims'
unload jobs (a victim whose job cannot be sent goes back on the books). Serving's capacity search,
the keeper's upkeep, operator unloads and operations all evict through these two."""

from __future__ import annotations

from gateway.scheduler import PlacementDecision
from gateway.serving.background import NATS_FAILURES
from gateway.serving.context import ServingContext
from gateway.serving.jobs import publish_unload
from gateway.serving.loading import record_failure
from streams.codes import ServingError
from streams.envelope import new_id
from streams.events import serving as s
from streams.events.base import Event


def planned_eviction(
    decision: PlacementDecision, accelerator_id: str, deployment_id: str
) -> s.EvictionPlanned:
    return s.EvictionPlanned(
        eviction_id=new_id(),
        accelerator_id=accelerator_id,
        victims=decision.evictions,
        for_deployment_id=deployment_id,
        required_bytes=decision.required_bytes,
        decision_fingerprint=decision.fingerprint,
    )


async def unload_victims(ctx: ServingContext, node_id: str, eviction: s.EvictionPlanned) -> None:
    """Send each victim's unload job. A victim whose job cannot be sent goes back on the books
    (`ResidencyUnloadFailed`), so that the eviction ends rather than waiting for an unload nobody
    was asked to do; then the failure is raised."""
    acc = eviction.accelerator_id
    for index, victim in enumerate(eviction.victims):
        try:
            await publish_unload(
                ctx, node_id, acc, victim, eviction.reason, f"evict-{eviction.eviction_id}-{victim}"
            )
        except NATS_FAILURES as failure:
            detail = f"the unload job could not be sent: {failure!r}"
            back: list[Event] = [
                s.ResidencyUnloadFailed(
                    accelerator_id=acc, deployment_id=v, code="CAPABILITY_UNAVAILABLE", detail=detail
                )
                for v in eviction.victims[index:]
            ]
            await record_failure(ctx, acc, back)
            raise ServingError("CAPABILITY_UNAVAILABLE", detail) from None
