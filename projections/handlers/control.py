"""Control-plane events -> rows: contracts, artifact sets, nodes, candidates/probes, approvals,
clients (never a key or a key hash), projects and the scheduler policy."""

from __future__ import annotations

from projections.handlers.ops import Op, up
from streams.events import control as c
from streams.events.base import Event

# Scheduler-policy settings the read model keeps as columns (the rest stay in `settings`).
POLICY_COLUMNS = ("safety_reserve_min_bytes", "safety_reserve_fraction", "telemetry_fresh_seconds")


def ops(event: Event, seq: int, at: str | None) -> list[Op] | None:
    """Rows for a control-plane event; None when the event is not one of this module's."""
    match event:
        case c.CapabilityContractRegistered():
            return [
                up(
                    "capability_contracts",
                    (event.capability,),
                    input_schema=event.input_schema,
                    output_schema=event.output_schema,
                    upgrade_class=event.upgrade_class,
                    limits=event.limits,
                    definition_sha256=event.definition_sha256,
                    registered_at=at,
                )
            ]
        case c.ArtifactSetRegistered():
            return [
                up(
                    "artifact_sets",
                    (event.artifact_set_id,),
                    name=event.name,
                    capability=event.capability,
                    node_id=event.node_id,
                    root=event.root,
                    files=event.files,
                    file_count=len(event.files),
                    total_bytes=sum(f.size for f in event.files),
                    risk_flags=event.risk_flags,
                    manifest_sha256=event.manifest_sha256,
                    source=event.source,
                    status="registered",
                    registered_at=at,
                    updated_at=at,
                )
            ]
        case c.ArtifactSetVerified():
            return [
                up(
                    "artifact_sets",
                    (event.artifact_set_id,),
                    status="verified",
                    manifest_sha256=event.manifest_sha256,
                    verified_bytes=event.verified_bytes,
                    failure_code=None,
                    failure_detail=None,
                    updated_at=at,
                )
            ]
        case c.ArtifactSetVerificationFailed():
            return [
                up(
                    "artifact_sets",
                    (event.artifact_set_id,),
                    status="verification_failed",
                    failure_code=event.code,
                    failure_detail=event.detail,
                    updated_at=at,
                )
            ]
        case c.ArtifactSetFetchProgressed():
            # For whoever waits on the fetching job; the set's row only shows it was touched.
            return [up("artifact_sets", (event.artifact_set_id,), updated_at=at)]
        case c.ArtifactSetQuarantined():
            return [
                up(
                    "artifact_sets",
                    (event.artifact_set_id,),
                    status="quarantined",
                    quarantine_reason=event.reason,
                    updated_at=at,
                )
            ]
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
        case c.ClientCreated():
            return [
                up(
                    "clients",
                    (event.client_id,),
                    name=event.name,
                    scopes=event.scopes,
                    requests_per_minute=event.requests_per_minute,
                    max_concurrency=event.max_concurrency,
                    priority=event.priority,
                    project_id=event.project_id,
                    enabled=True,
                    created_at=at,
                    updated_at=at,
                )
            ]
        case c.ClientLimitsChanged():
            return [
                up(
                    "clients",
                    (event.client_id,),
                    scopes=event.scopes,
                    requests_per_minute=event.requests_per_minute,
                    max_concurrency=event.max_concurrency,
                    priority=event.priority,
                    updated_at=at,
                )
            ]
        case c.CredentialIssued():
            return [
                up(
                    "credentials",
                    (event.credential_id,),
                    client_id=event.client_id,
                    key_prefix=event.key_prefix,
                    state="active",
                    expires_at=event.expires_at,
                    issued_at=at,
                    updated_at=at,
                )
            ]
        case c.CredentialRotated():
            return [
                up(
                    "credentials",
                    (event.old_credential_id,),
                    client_id=event.client_id,
                    state="rotated" if event.grace_until else "replaced",
                    grace_until=event.grace_until,
                    replaced_by=event.new_credential_id,
                    updated_at=at,
                ),
                up(
                    "credentials",
                    (event.new_credential_id,),
                    client_id=event.client_id,
                    key_prefix=event.key_prefix,
                    state="active",
                    expires_at=event.expires_at,
                    issued_at=at,
                    updated_at=at,
                ),
            ]
        case c.CredentialRevoked():
            return [
                up(
                    "credentials",
                    (event.credential_id,),
                    client_id=event.client_id,
                    state="revoked",
                    revoke_reason=event.reason,
                    updated_at=at,
                )
            ]
        case c.ClientDisabled():
            return [
                up("clients", (event.client_id,), enabled=False, disabled_reason=event.reason, updated_at=at)
            ]
        case c.ClientEnabled():
            return [up("clients", (event.client_id,), enabled=True, disabled_reason=None, updated_at=at)]
        case c.ProjectRegistered():
            return [up("projects", (event.project_id,), name=event.name, owner=event.owner, registered_at=at)]
        case c.ProjectBoundToChannel():
            return [
                up(
                    "project_channels",
                    (event.project_id, event.capability),
                    channel=event.channel,
                    bound_at=at,
                )
            ]
        case c.ClientBoundToProject():
            return [
                up("project_clients", (event.project_id, event.client_id), bound_at=at),
                up("clients", (event.client_id,), project_id=event.project_id, updated_at=at),
            ]
        case c.ProjectFitEvidenceRecorded():
            return [
                up(
                    "project_fit_evidence",
                    (event.project_id, event.capability),
                    evidence=event.evidence,
                    passed=event.passed,
                    failed_gates=event.failed_gates,
                    recorded_at=at,
                )
            ]
        case c.SchedulerPolicyRevised():
            known = {k: v for k, v in event.settings.items() if k in POLICY_COLUMNS}
            if "safety_reserve_min_bytes" in known:
                known["safety_reserve_min_bytes"] = int(known["safety_reserve_min_bytes"])
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
