"""Small builders for scheduler tests: readable defaults, override only what a test is about."""

from __future__ import annotations

import msgspec

from gateway.scheduler import (
    GIB,
    AcceleratorState,
    Channel,
    Lease,
    ModelEnvelope,
    PlacementDecision,
    PlacementRequest,
    Resident,
    SchedulerPolicy,
)

NOW = 1_700_000_000.0
POLICY = SchedulerPolicy()


def gib(value: float) -> int:
    return int(value * GIB)


def resident(deployment_id: str, size_gib: float, **fields: object) -> Resident:
    return Resident(deployment_id=deployment_id, measured_bytes=gib(size_gib), **fields)  # type: ignore[arg-type]


def lease(lease_id: str, deployment_id: str, reserved_gib: float, materialised_gib: float = 0.0) -> Lease:
    return Lease(
        lease_id=lease_id,
        deployment_id=deployment_id,
        reserved_bytes=gib(reserved_gib),
        materialised_bytes=gib(materialised_gib),
    )


def gpu(
    accelerator_id: str = "gpu-0",
    total_gib: float = 80,
    residents: tuple[Resident, ...] = (),
    leases: tuple[Lease, ...] = (),
    external_gib: float = 0.0,
    fresh: bool = True,
    **fields: object,
) -> AcceleratorState:
    """An accelerator whose fresh telemetry shows exactly its residents, materialised leases and
    ``external_gib`` of someone else's memory."""
    attributed = sum(item.measured_bytes for item in residents) + sum(
        item.materialised_bytes for item in leases
    )
    base: dict[str, object] = {
        "accelerator_id": accelerator_id,
        "node_id": f"node-of-{accelerator_id}",
        "total_bytes": gib(total_gib),
        "observed_used_bytes": attributed + gib(external_gib),
        "observed_at": NOW - 1.0 if fresh else NOW - 3600.0,
        "residents": residents,
        "leases": leases,
    }
    base.update(fields)
    return AcceleratorState(**base)  # type: ignore[arg-type]


def model(
    deployment_id: str = "new-model",
    required_gib: float = 10,
    peak_gib: float = 8,
    channel: Channel = Channel.PRODUCTION,
    cold_load_ms: float = 2000.0,
    **fields: object,
) -> ModelEnvelope:
    return ModelEnvelope(
        deployment_id=deployment_id,
        required_bytes=gib(required_gib),
        peak_bytes=gib(peak_gib),
        channel=channel,
        cold_load_ms=cold_load_ms,
        **fields,  # type: ignore[arg-type]
    )


def ask(**fields: object) -> PlacementRequest:
    return PlacementRequest(**fields)  # type: ignore[arg-type]


def apply(
    decision: PlacementDecision, accelerators: tuple[AcceleratorState, ...], deployment_id: str
) -> AcceleratorState:
    """The chosen accelerator once the decision's evictions completed and its lease was granted.

    Evicted bytes leave the books and the hardware count alike; the new lease reserves the
    decision's required bytes, none of them materialised yet.
    """
    chosen = next(item for item in accelerators if item.accelerator_id == decision.accelerator_id)
    evicted = set(decision.evictions)
    removed = sum(item.measured_bytes for item in chosen.residents if item.deployment_id in evicted)
    observed = chosen.observed_used_bytes
    return msgspec.structs.replace(
        chosen,
        residents=tuple(item for item in chosen.residents if item.deployment_id not in evicted),
        observed_used_bytes=None if observed is None else max(0, observed - removed),
        leases=(
            *chosen.leases,
            Lease(lease_id="~granted", deployment_id=deployment_id, reserved_bytes=decision.required_bytes),
        ),
    )
