"""Nodes (registration, enablement, workers, loss) and the scheduler policy -> rows."""

from __future__ import annotations

from projections.handlers.ops import Op, up
from streams.events import control as c
from streams.events.base import Event

# Scheduler-policy settings the read model keeps as columns (the rest stay in `settings`).
POLICY_COLUMNS = (
    "safety_reserve_min_bytes",
    "safety_reserve_fraction",
    "telemetry_fresh_seconds",
    "lab_paused",
)


def ops(event: Event, seq: int, at: str | None) -> list[Op] | None:
    """Rows for a node's or the scheduler policy's event; None when the event is not one of this module's."""
    match event:
        case c.NodeRegistered():
            rows = [
                up(
                    "nodes",
                    (event.node_id,),
                    hostname=event.hostname,
                    hardware_fingerprint=event.hardware_fingerprint,
                    protocol_capabilities=event.protocol_capabilities,
                    runtimes=event.runtimes,
                    agent_version=event.agent_version,
                    registered_at=at,
                    updated_at=at,
                )
            ]
            for a in event.accelerators:
                rows.append(
                    up(
                        "accelerators",
                        (a.accelerator_id,),
                        node_id=event.node_id,
                        kind=a.kind,
                        name=a.name,
                        total_bytes=a.total_bytes,
                        compute_capability=a.compute_capability,
                        uuid=a.uuid,
                        registered_at=at,
                    )
                )
            return rows
        case c.NodeEnabled():
            return [up("nodes", (event.node_id,), enabled=True, disabled_reason=None, updated_at=at)]
        case c.NodeDisabled():
            return [up("nodes", (event.node_id,), enabled=False, disabled_reason=event.reason, updated_at=at)]
        case c.NodeProductionEligibilityChanged():
            return [
                up(
                    "nodes",
                    (event.node_id,),
                    production_eligible=event.eligible,
                    eligibility_reason=event.reason,
                    updated_at=at,
                )
            ]
        case c.NodeDecommissioned():
            return [
                up(
                    "nodes",
                    (event.node_id,),
                    decommissioned=True,
                    decommission_reason=event.reason,
                    enabled=False,
                    updated_at=at,
                )
            ]
        case c.WorkerStarted():
            return [
                up(
                    "nodes",
                    (event.node_id,),
                    generation=event.generation,
                    worker_started_at=at,
                    lost_at=None,
                    lost_reason=None,
                    updated_at=at,
                )
            ]
        case c.NodeLost():
            return [up("nodes", (event.node_id,), lost_at=at, lost_reason=event.reason, updated_at=at)]
        case c.SchedulerPolicyRevised():
            known = {k: v for k, v in event.settings.items() if k in POLICY_COLUMNS}
            if "safety_reserve_min_bytes" in known:
                known["safety_reserve_min_bytes"] = int(known["safety_reserve_min_bytes"])
            if "lab_paused" in known:  # stored as 0 or 1, like every boolean setting
                known["lab_paused"] = bool(known["lab_paused"])
            return [
                up(
                    "scheduler_policy",
                    (1,),
                    revision=event.revision,
                    settings=event.settings,
                    revised_at=at,
                    **known,
                ),
                up(
                    "policy_revisions",
                    (seq,),
                    revision=event.revision,
                    settings=event.settings,
                    revised_at=at,
                ),
            ]
    return None
