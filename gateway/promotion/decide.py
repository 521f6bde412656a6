"""`decide_<aggregate>(state, command, now) -> events` for artifact sets, nodes, candidates and
approvals. Pure. A refusal raises `ServingError` with the reference's code and yields no events;
a command that would change nothing yields `[]`.
"""

from __future__ import annotations

from datetime import datetime

from gateway.promotion.commands import (
    ApprovalCommand,
    ApproveLabExecution,
    ApproveProduction,
    ArtifactCommand,
    CandidateCommand,
    CreateCandidate,
    DecommissionNode,
    MarkApprovalStale,
    MarkLabReady,
    NodeCommand,
    QuarantineArtifactSet,
    RegisterArtifactSet,
    RequestProbe,
    RevokeApproval,
    SetNodeEligibility,
    SetNodeEnabled,
)
from gateway.promotion.evidence import approval_id_for, changed_facts, facts_of, fingerprint
from gateway.promotion.gates import refusal
from gateway.promotion.model import ApprovalState, ArtifactSetState, CandidateState, NodeState
from gateway.promotion.profile import check_profile, output_mismatch
from streams.codes import ServingError
from streams.contracts import CONTRACTS
from streams.events import Event
from streams.events import control as c


def decide_artifact_set(
    state: ArtifactSetState | None, command: ArtifactCommand, now: datetime
) -> list[Event]:
    match command:
        case RegisterArtifactSet(registration=new):
            if not new.files:
                raise ServingError("ARTIFACT_INCOMPLETE", "the artifact set has no files")
            if state is None:
                return [new]
            if state.files != new.files:
                raise _registered_with_other_files(state, new)
            if (state.manifest_sha256, state.root, state.node_id) == (
                new.manifest_sha256,
                new.root,
                new.node_id,
            ):
                return []
            return [new]  # the same files in another place: verified again there
        case QuarantineArtifactSet():
            if state is None:
                raise _unknown_set(command.artifact_set_id)
            if state.quarantined:
                return []
            return [c.ArtifactSetQuarantined(artifact_set_id=state.artifact_set_id, reason=command.reason)]
    raise AssertionError(command)  # pragma: no cover


def decide_node(state: NodeState | None, command: NodeCommand, now: datetime) -> list[Event]:
    if state is None:
        raise ServingError("NO_ELIGIBLE_NODE", f"no node {command.node_id!r}", "node_id", http_status=404)
    match command:
        case SetNodeEnabled(enabled=True):
            if state.decommissioned:
                raise ServingError(
                    "STATE_CONFLICT",
                    f"node {state.node_id} is decommissioned: it is never enabled again",
                    "enabled",
                    details={"node_id": state.node_id},
                )
            return [] if state.enabled else [c.NodeEnabled(node_id=state.node_id)]
        case SetNodeEnabled(enabled=False):
            return [c.NodeDisabled(node_id=state.node_id, reason=command.reason)] if state.enabled else []
        case SetNodeEligibility():
            if state.production_eligible == command.eligible:
                return []
            return [
                c.NodeProductionEligibilityChanged(
                    node_id=state.node_id, eligible=command.eligible, reason=command.reason
                )
            ]
        case DecommissionNode():
            return (
                []
                if state.decommissioned
                else [c.NodeDecommissioned(node_id=state.node_id, reason=command.reason)]
            )
    raise AssertionError(command)  # pragma: no cover


def candidate_not_found(candidate_id: str = "") -> ServingError:
    named = f" {candidate_id!r}" if candidate_id else ""
    return ServingError(
        "CANDIDATE_NOT_FOUND",
        f"no candidate{named} exists: `modelforge candidates list` shows them, "
        "`modelforge candidates create` makes one",
        "candidate_id",
    )


def decide_candidate(state: CandidateState | None, command: CandidateCommand, now: datetime) -> list[Event]:
    match command:
        case CreateCandidate():
            return _create_candidate(state, command)
        case _ if state is None:
            raise candidate_not_found()
        case RequestProbe():
            _check_lab_approval(state, command, now)
            if command.artifact_quarantined:
                raise ServingError("ARTIFACT_NOT_VERIFIED", "the candidate's artifact set is quarantined")
            return [
                c.ProbeRequested(
                    candidate_id=state.candidate_id,
                    probe_id=command.probe_id,
                    node_id=command.node_id,
                    accelerator_id=command.accelerator_id,
                    lab_approval_id=command.lab_approval_id,
                    manifest_sha256=command.manifest_sha256,
                )
            ]
        case MarkLabReady():
            probe = state.probe(command.probe_id)
            if probe is None or probe.result is None or not probe.complete_evidence:
                return []
            if state.lab_ready_probe == command.probe_id:
                return []
            if output_mismatch(state.capability, state.runtime_profile, probe.result):
                return []  # the model does not produce the space the candidate declares
            return [c.CandidateLabReady(candidate_id=state.candidate_id, probe_id=command.probe_id)]
    raise AssertionError(command)  # pragma: no cover


def _create_candidate(state: CandidateState | None, command: CreateCandidate) -> list[Event]:
    if command.capability not in CONTRACTS:
        raise ServingError("UNKNOWN_CAPABILITY", f"unknown capability {command.capability!r}", "capability")
    if command.artifact_capability is None:
        raise _unknown_set(command.artifact_set_id)
    if command.artifact_capability != command.capability:
        raise ServingError(
            "CAPABILITY_UNAVAILABLE",
            f"the artifact set serves {command.artifact_capability}, not {command.capability}",
            "capability",
            http_status=409,
        )
    if command.artifact_quarantined:
        raise ServingError("ARTIFACT_NOT_VERIFIED", "the artifact set is quarantined", "artifact_set_id")
    check_profile(command.capability, command.runtime_profile, command.deployment_config)
    event = c.CandidateRegistered(
        candidate_id=command.candidate_id,
        capability=command.capability,
        artifact_set_id=command.artifact_set_id,
        runtime_profile=dict(command.runtime_profile),
        deployment_config=dict(command.deployment_config),
    )
    if state is not None:
        same = (state.capability, state.artifact_set_id, state.runtime_profile, state.deployment_config) == (
            event.capability,
            event.artifact_set_id,
            event.runtime_profile,
            event.deployment_config,
        )
        if same:
            return []
        raise ServingError(
            "STATE_CONFLICT", f"candidate {state.candidate_id!r} exists with other facts", "candidate_id"
        )
    return [event]


def _check_lab_approval(state: CandidateState, command: RequestProbe, now: datetime) -> None:
    approval = command.lab_approval
    if approval is None or approval.kind != "lab_execution" or approval.candidate_id != state.candidate_id:
        raise ServingError(
            "LAB_APPROVAL_STALE", "no lab execution approval of this candidate", "lab_approval_id"
        )
    if not approval.usable(now):
        raise ServingError("LAB_APPROVAL_STALE", f"the lab approval is {approval.status} or expired")
    if command.node_id not in approval.node_ids:
        raise ServingError("LAB_APPROVAL_STALE", f"the lab approval does not cover node {command.node_id}")


def decide_approval(state: ApprovalState | None, command: ApprovalCommand, now: datetime) -> list[Event]:
    match command:
        case ApproveLabExecution():
            if not command.candidate_known:
                raise candidate_not_found(command.candidate_id)
            if command.expires_at <= now:
                raise ServingError("INVALID_INPUT", "a lab approval must expire in the future", "expires_at")
            if not command.node_ids:
                raise ServingError("INVALID_INPUT", "a lab approval names at least one node", "node_ids")
            if state is not None:
                return []
            return [
                c.LabExecutionApproved(
                    approval_id=command.approval_id,
                    candidate_id=command.candidate_id,
                    node_ids=tuple(sorted(set(command.node_ids))),
                    expires_at=command.expires_at,
                )
            ]
        case ApproveProduction():
            _require_production_record(command)
            if command.failures:
                raise refusal(list(command.failures))
            evidence_fp = fingerprint(command.evidence)
            if state is not None and state.revoked:
                # The same facts name the same approval: approving them again must not undo a revocation.
                raise ServingError(
                    "PRODUCTION_APPROVAL_STALE",
                    f"approval {state.approval_id} of these same facts was revoked; a revocation is final: "
                    "approve with a new supply_chain_review to record a new approval",
                    details={"approval_id": state.approval_id, "revoked": True},
                )
            if state is not None and state.status == "approved" and state.evidence_fingerprint == evidence_fp:
                return []
            return [
                c.ProductionApproved(
                    approval_id=approval_id_for(evidence_fp),
                    candidate_id=command.candidate_id,
                    evidence_fingerprint=evidence_fp,
                    evidence=facts_of(command.evidence),
                    approved_by=command.approved_by,
                    reason=command.reason,
                )
            ]
        case _ if state is None:
            raise ServingError("PRODUCTION_APPROVAL_NOT_FOUND", "unknown approval", "approval_id")
        case RevokeApproval():
            return (
                []
                if state.revoked
                else [c.ApprovalRevoked(approval_id=state.approval_id, reason=command.reason)]
            )
        case MarkApprovalStale():
            if state.kind != "production" or state.status != "approved":
                return []
            changed = changed_facts(state.evidence, command.current)
            return (
                [c.ApprovalMarkedStale(approval_id=state.approval_id, changed_facts=changed)]
                if changed
                else []
            )
    raise AssertionError(command)  # pragma: no cover


def _require_production_record(command: ApproveProduction) -> None:
    """A production approval records a supply-chain review, who approved and why (reference:
    a structured review, approved_by and reason are required); missing one is bad input."""
    record = {
        "supply_chain_review": command.evidence.supply_chain.get("review", ""),
        "reason": command.reason,
        "x-mf-operator": command.approved_by,
    }
    for name, value in record.items():
        if not value.strip():
            raise ServingError("INVALID_INPUT", f"a production approval needs a non-empty `{name}`", name)


def _registered_with_other_files(state: ArtifactSetState, new: c.ArtifactSetRegistered) -> ServingError:
    """An artifact set never changes once registered: what was probed, approved and promoted from
    it is what its id names for good. Other files are another set (another name)."""
    return ServingError(
        "STATE_CONFLICT",
        f"artifact set {state.artifact_set_id!r} is registered with other files; a registered set never "
        "changes: register the new files under another name",
        "name",
        details={
            "artifact_set_id": state.artifact_set_id,
            "manifest_sha256": state.manifest_sha256,
            "offered_manifest_sha256": new.manifest_sha256,
        },
    )


def _unknown_set(artifact_set_id: str) -> ServingError:
    return ServingError(
        "ARTIFACT_INCOMPLETE", f"no artifact set {artifact_set_id!r}", "artifact_set_id", http_status=404
    )
