"""Serving events -> rows: deployments and experiments, and the accelerator aggregate (leases,
residencies, evictions, pressure, placement decisions, co-residency evidence).

Residency health layers: a completed load proves process, runtime and model healthy; a failed
load marks the model layer unhealthy with the failure as detail; an unload keeps the last layers.
"""

from __future__ import annotations

from projections.handlers.ops import Op, up
from streams.events import serving as s
from streams.events.base import Event


def ops(event: Event, seq: int, at: str | None) -> list[Op] | None:
    match event:
        case s.LeaseGranted():
            return [
                up(
                    "leases",
                    (event.lease_id,),
                    accelerator_id=event.accelerator_id,
                    deployment_id=event.deployment_id,
                    request_id=event.request_id,
                    client_id=event.client_id,
                    reserved_bytes=event.reserved_bytes,
                    expires_at=event.expires_at,
                    decision_fingerprint=event.decision_fingerprint,
                    state="active",
                    granted_at=at,
                ),
                up(
                    "placements",
                    (seq,),
                    accelerator_id=event.accelerator_id,
                    request_id=event.request_id,
                    deployment_id=event.deployment_id,
                    verdict="ADMIT",
                    decision_fingerprint=event.decision_fingerprint,
                    lease_id=event.lease_id,
                    required_bytes=event.reserved_bytes,
                    decided_at=at,
                ),
                Op(
                    "deployment_usage",
                    (event.accelerator_id, event.deployment_id),
                    {"last_used_at": at},
                    {"leases_granted": 1},
                ),
            ]
        case s.LeaseReleased():
            return [
                up(
                    "leases",
                    (event.lease_id,),
                    accelerator_id=event.accelerator_id,
                    state="released",
                    outcome=event.outcome,
                    ended_at=at,
                )
            ]
        case s.LeaseExpired():
            return [
                up(
                    "leases",
                    (event.lease_id,),
                    accelerator_id=event.accelerator_id,
                    state="expired",
                    outcome="expired",
                    ended_at=at,
                )
            ]
        case s.ResidencyLoadRequested():
            return [
                up(
                    "residencies",
                    (event.accelerator_id, event.deployment_id),
                    node_id=event.node_id,
                    state="requested",
                    load_id=event.load_id,
                    load_reason=event.reason,
                    required_bytes=event.required_bytes,
                    failure_code=None,
                    failure_detail=None,
                    updated_at=at,
                )
            ]
        case s.ResidencyLoading():
            return [
                up(
                    "residencies",
                    (event.accelerator_id, event.deployment_id),
                    state="loading",
                    load_id=event.load_id,
                    generation=event.generation,
                    updated_at=at,
                )
            ]
        case s.ResidencyLoaded():
            return [
                Op(
                    "residencies",
                    (event.accelerator_id, event.deployment_id),
                    {
                        "state": "loaded",
                        "load_id": event.load_id,
                        "generation": event.generation,
                        "runtime": event.runtime,
                        "baseline_bytes": event.baseline_bytes,
                        "loaded_bytes": event.loaded_bytes,
                        "peak_bytes": event.peak_bytes,
                        "measured_bytes": event.measured_bytes,
                        "cold_load_ms": event.cold_load_ms,
                        "engine_cache_hit": event.engine_cache_hit,
                        "health_process": True,
                        "health_runtime": True,
                        "health_model": True,
                        "health_detail": "",
                        "drained": False,
                        "failure_code": None,
                        "failure_detail": None,
                        "updated_at": at,
                    },
                    {"load_count": 1},
                )
            ]
        case s.ResidencyLoadFailed():
            return [
                up(
                    "residencies",
                    (event.accelerator_id, event.deployment_id),
                    state="load_failed",
                    load_id=event.load_id,
                    measured_bytes=0,
                    health_model=False,
                    health_detail=f"{event.code}: {event.detail}",
                    failure_code=event.code,
                    failure_detail=event.detail,
                    updated_at=at,
                )
            ]
        case s.ResidencyUnloading():
            return [
                up(
                    "residencies",
                    (event.accelerator_id, event.deployment_id),
                    state="unloading",
                    unload_reason=event.reason,
                    updated_at=at,
                )
            ]
        case s.ResidencyUnloaded():
            return [_unloaded(event, at, reclaimed_bytes=event.reclaimed_bytes)]
        case s.ResidencyUnloadFailed() if not event.still_resident:  # gone, its memory not seen freed
            failure = {"failure_code": event.code, "failure_detail": event.detail}
            return [
                _unloaded(
                    event, at, reclaimed_bytes=0, health_detail=f"{event.code}: {event.detail}", **failure
                )
            ]
        case s.ResidencyUnloadFailed():
            return [
                up(
                    "residencies",
                    (event.accelerator_id, event.deployment_id),
                    state="unload_failed",
                    failure_code=event.code,
                    failure_detail=event.detail,
                    health_detail=f"{event.code}: {event.detail}",
                    updated_at=at,
                )
            ]
        case s.ResidencyReconciled():
            rows = [
                up("residencies", (event.accelerator_id, d), generation=event.generation, updated_at=at)
                for d in event.held
            ]
            rows += [
                up(
                    "residencies",
                    (event.accelerator_id, d),
                    state="cold",
                    measured_bytes=0,
                    generation=event.generation,
                    updated_at=at,
                )
                for d in event.dropped
            ]
            return rows
        case s.EvictionPlanned():
            return [
                up(
                    "evictions",
                    (event.eviction_id,),
                    accelerator_id=event.accelerator_id,
                    victims=event.victims,
                    for_deployment_id=event.for_deployment_id,
                    required_bytes=event.required_bytes,
                    decision_fingerprint=event.decision_fingerprint,
                    state="planned",
                    planned_at=at,
                ),
                up(
                    "placements",
                    (seq,),
                    accelerator_id=event.accelerator_id,
                    deployment_id=event.for_deployment_id,
                    verdict="ADMIT_AFTER_EVICTION",
                    reason_codes=(),
                    decision_fingerprint=event.decision_fingerprint,
                    eviction_id=event.eviction_id,
                    required_bytes=event.required_bytes,
                    decided_at=at,
                ),
            ]
        case s.EvictionCompleted():
            return [
                up(
                    "evictions",
                    (event.eviction_id,),
                    accelerator_id=event.accelerator_id,
                    state=event.outcome,
                    reclaimed_bytes=event.reclaimed_bytes,
                    completed_at=at,
                )
            ]
        case s.PressureChanged():
            return [
                up(
                    "accelerators",
                    (event.accelerator_id,),
                    pressure=event.current,
                    pressure_utilization=event.utilization,
                    pressure_changed_at=at,
                )
            ]
        case s.PlacementRejected() | s.PlacementDryRun():
            return [_counted_placement(seq, event, at)]
        case s.ResidencyHealthChecked():
            detail = f"{event.code}: {event.detail}" if event.code else event.detail
            return [
                up(
                    "residencies",
                    (event.accelerator_id, event.deployment_id),
                    generation=event.generation,
                    health_process=event.process_ok,
                    health_runtime=event.runtime_ok,
                    health_model=event.model_ok,
                    health_detail=detail,
                    health_checked_at=at,
                    updated_at=at,
                )
            ]
        case s.ResidencyDrained():
            return [
                up(
                    "residencies",
                    (event.accelerator_id, event.deployment_id),
                    generation=event.generation,
                    drained=True,
                    updated_at=at,
                )
            ]
        case s.AgentJobFailed():
            return [
                up(
                    "agent_job_failures",
                    (event.job_id,),
                    op=event.op,
                    accelerator_id=event.accelerator_id,
                    deployment_id=event.deployment_id,
                    code=event.code,
                    detail=event.detail,
                    deliveries=event.deliveries,
                    failed_at=at,
                )
            ]
        case s.CoResidencyProven():
            a, b = sorted((event.deployment_a, event.deployment_b))
            return [
                up(
                    "co_residency",
                    (event.accelerator_id, a, b),
                    generation=event.generation,
                    observed_bytes=event.observed_bytes,
                    state=event.state,
                    proven_at=at,
                )
            ]
        case _:
            return _deployment(event, at)


def _unloaded(event: s.ResidencyUnloaded | s.ResidencyUnloadFailed, at: str | None, **columns: object) -> Op:
    key = (event.accelerator_id, event.deployment_id)
    return up("residencies", key, state="unloaded", measured_bytes=0, updated_at=at, **columns)


def _deployment(event: Event, at: str | None) -> list[Op] | None:
    match event:
        case s.DeploymentPromoted():
            e = event.envelope
            return [
                up(
                    "deployments",
                    (event.deployment_id,),
                    capability=event.capability,
                    candidate_id=event.candidate_id,
                    approval_id=event.approval_id,
                    artifact_set_id=event.artifact_set_id,
                    model_name=event.model_name,
                    channel=event.channel,
                    status="active",
                    active=True,
                    required_bytes=e.required_bytes,
                    peak_bytes=e.peak_bytes,
                    per_request_bytes=e.per_request_bytes,
                    cold_load_ms=e.cold_load_ms,
                    residency_kind=event.residency.kind,
                    keep_warm_ttl_s=event.residency.keep_warm_ttl_s,
                    embedding_space=event.embedding_space,
                    max_batch_size=event.max_batch_size,
                    **_scaling(event.replicas, event.placement),
                    created_at=at,
                    updated_at=at,
                )
            ]
        case s.ExperimentCreated():
            e = event.envelope
            return [
                up(
                    "deployments",
                    (event.deployment_id,),
                    capability=event.capability,
                    candidate_id=event.candidate_id,
                    artifact_set_id=event.artifact_set_id,
                    model_name=event.model_name,
                    channel="experiment",
                    route=event.route,
                    status="created",
                    active=False,
                    required_bytes=e.required_bytes,
                    peak_bytes=e.peak_bytes,
                    per_request_bytes=e.per_request_bytes,
                    cold_load_ms=e.cold_load_ms,
                    embedding_space=event.embedding_space,
                    **_caps(s.EXPERIMENT_CAPS),
                    created_at=at,
                    updated_at=at,
                )
            ]
        case s.ExperimentActivated():
            return [up("deployments", (event.deployment_id,), status="active", active=True, updated_at=at)]
        case s.ExperimentDeactivated():
            return [
                up(
                    "deployments",
                    (event.deployment_id,),
                    status="deactivated",
                    active=False,
                    status_reason=event.reason,
                    updated_at=at,
                )
            ]
        case s.DeploymentDraining():
            return [
                up(
                    "deployments",
                    (event.deployment_id,),
                    status="draining",
                    status_reason=event.reason,
                    updated_at=at,
                )
            ]
        case s.DeploymentDrained():
            return [up("deployments", (event.deployment_id,), status="drained", active=False, updated_at=at)]
        case s.ResidencyPolicyChanged():
            return [
                up(
                    "deployments",
                    (event.deployment_id,),
                    residency_kind=event.residency.kind,
                    keep_warm_ttl_s=event.residency.keep_warm_ttl_s,
                    updated_at=at,
                )
            ]
        case s.DeploymentScalingChanged():
            scaling = _scaling(event.replicas, event.placement)
            return [up("deployments", (event.deployment_id,), **scaling, updated_at=at)]
        case s.DeploymentCapsChanged():
            return [up("deployments", (event.deployment_id,), **_caps(event.caps), updated_at=at)]
    return None


def _counted_placement(seq: int, event: s.PlacementRejected | s.PlacementDryRun, at: str | None) -> Op:
    """A window's refusals, queueings or dry runs as one row, with their number in `decisions`."""
    request_id, dry_run = (
        (event.request_id, event.dry_run) if isinstance(event, s.PlacementRejected) else (None, True)
    )
    return up(
        "placements",
        (seq,),
        accelerator_id=event.accelerator_id,
        request_id=request_id,
        deployment_id=event.deployment_id,
        verdict=event.verdict,
        reason_codes=event.reason_codes,
        decision_fingerprint=event.decision_fingerprint,
        decisions=event.count,
        window_s=event.window_s,
        first_at=event.first_at,
        dry_run=dry_run,
        required_bytes=event.required_bytes,
        schedulable_bytes=event.schedulable_bytes,
        decided_at=at,
    )


def _caps(caps: s.DeploymentCaps) -> dict[str, object]:
    return {"max_concurrency": caps.max_concurrency, "max_queue_depth": caps.max_queue_depth}


def _scaling(replicas: s.Replicas, placement: str) -> dict[str, object]:
    return {"replicas_min": replicas.min, "replicas_max": replicas.max, "placement": placement}
