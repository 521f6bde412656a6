"""Candidates, their probes, and approvals -> rows."""

from __future__ import annotations

from projections.handlers.ops import Op, up
from streams.events import control as c
from streams.events.base import Event


def ops(event: Event, seq: int, at: str | None) -> list[Op] | None:
    """Rows for a candidate's or an approval's event; None when the event is not one of this module's."""
    match event:
        case c.CandidateRegistered():
            return [
                up(
                    "candidates",
                    (event.candidate_id,),
                    capability=event.capability,
                    artifact_set_id=event.artifact_set_id,
                    runtime_profile=event.runtime_profile,
                    deployment_config=event.deployment_config,
                    status="registered",
                    registered_at=at,
                    updated_at=at,
                )
            ]
        case c.ProbeRequested():
            return [
                up(
                    "probes",
                    (event.probe_id,),
                    candidate_id=event.candidate_id,
                    node_id=event.node_id,
                    accelerator_id=event.accelerator_id,
                    lab_approval_id=event.lab_approval_id,
                    status="requested",
                    requested_at=at,
                ),
                up(
                    "candidates",
                    (event.candidate_id,),
                    status="probing",
                    latest_probe_id=event.probe_id,
                    updated_at=at,
                ),
            ]
        case c.ProbeCompleted():
            h = event.health
            return [
                up(
                    "probes",
                    (event.probe_id,),
                    candidate_id=event.candidate_id,
                    node_id=event.node_id,
                    accelerator_id=event.accelerator_id,
                    status="completed",
                    hardware_fingerprint=event.hardware_fingerprint,
                    runtime=event.runtime,
                    health_process=h.process,
                    health_runtime=h.runtime,
                    health_model=h.model,
                    health_detail=h.detail,
                    output_valid=event.output_valid,
                    baseline_bytes=event.baseline_bytes,
                    loaded_bytes=event.loaded_bytes,
                    peak_bytes=event.peak_bytes,
                    cold_load_ms=event.cold_load_ms,
                    inference_ms=event.inference_ms,
                    unload_reclaimed_bytes=event.unload_reclaimed_bytes,
                    weights_bytes=event.weights_bytes,
                    finished_at=at,
                ),
                up(
                    "candidates",
                    (event.candidate_id,),
                    status="probed",
                    latest_probe_id=event.probe_id,
                    updated_at=at,
                ),
            ]
        case c.ProbeFailed():
            return [
                up(
                    "probes",
                    (event.probe_id,),
                    candidate_id=event.candidate_id,
                    node_id=event.node_id,
                    status="failed",
                    failure_code=event.code,
                    failure_detail=event.detail,
                    finished_at=at,
                ),
                up(
                    "candidates",
                    (event.candidate_id,),
                    status="probe_failed",
                    latest_probe_id=event.probe_id,
                    updated_at=at,
                ),
            ]
        case c.CandidateLabReady():
            return [
                up(
                    "candidates",
                    (event.candidate_id,),
                    status="lab_ready",
                    latest_probe_id=event.probe_id,
                    updated_at=at,
                )
            ]
        case c.LabExecutionApproved():
            return [
                up(
                    "approvals",
                    (event.approval_id,),
                    kind="lab",
                    candidate_id=event.candidate_id,
                    node_ids=event.node_ids,
                    expires_at=event.expires_at,
                    status="active",
                    approved_at=at,
                    updated_at=at,
                )
            ]
        case c.ProductionApproved():
            return [
                up(
                    "approvals",
                    (event.approval_id,),
                    kind="production",
                    candidate_id=event.candidate_id,
                    evidence_fingerprint=event.evidence_fingerprint,
                    evidence=event.evidence,
                    approved_by=event.approved_by,
                    approval_reason=event.reason,
                    status="active",
                    approved_at=at,
                    updated_at=at,
                )
            ]
        case c.ApprovalRevoked():
            return [
                up(
                    "approvals",
                    (event.approval_id,),
                    status="revoked",
                    revoke_reason=event.reason,
                    updated_at=at,
                )
            ]
        case c.ApprovalMarkedStale():
            return [
                up(
                    "approvals",
                    (event.approval_id,),
                    stale=True,
                    stale_facts=event.changed_facts,
                    stale_at=at,
                    updated_at=at,
                )
            ]
    return None
