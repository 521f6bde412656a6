"""Deployment decisions: promotion to stable (§5.4) and lab experiments (§5.5).

Pure. Identity is derived, not drawn: a deployment's id follows from its config fingerprint
(promoting the same config twice returns the first), an experiment's from its route.
"""

from __future__ import annotations

from datetime import datetime

import msgspec

from gateway.deployments.model import DeploymentState
from gateway.deployments.routes import check_model_name, check_route
from gateway.promotion.envelope import envelope_from_probe
from gateway.promotion.evidence import Evidence, changed_facts, digest, fingerprint
from gateway.promotion.gates import GateFailure, refusal
from gateway.promotion.model import ApprovalState, ArtifactSetState, CandidateState, NodeState, ProbeRecord
from gateway.promotion.profile import (
    EMBEDDING_CAPABILITIES,
    max_batch_size,
    residency_policy,
    scaling,
    truncatable,
)
from streams.codes import ServingError
from streams.events import Event
from streams.events import serving as s


class PromotionFacts(msgspec.Struct, frozen=True, kw_only=True):
    candidate_id: str
    approval: ApprovalState | None
    candidate: CandidateState | None
    artifacts: ArtifactSetState | None
    probe: ProbeRecord | None
    node: NodeState | None
    current: Evidence | None  # today's facts, recomputed
    failures: tuple[GateFailure, ...]
    contract_known: bool
    deployments: tuple[DeploymentState, ...]  # every deployment (of every contract)


class Promotion(msgspec.Struct, frozen=True):
    deployment_id: str
    events: list[Event]  # empty: this exact config is already deployed
    embedding_space: s.EmbeddingSpace | None
    reindex_required: bool


def embedding_space(candidate: CandidateState, artifacts: ArtifactSetState) -> s.EmbeddingSpace | None:
    if candidate.capability not in EMBEDDING_CAPABILITIES:
        return None
    profile = candidate.runtime_profile
    identity = {
        "artifact_set": artifacts.artifact_set_id,
        "manifest": artifacts.manifest_sha256,
        "runtime_profile": digest(profile),
        "contract": candidate.capability,
        "dimension": profile["dimension"],
        "normalized": profile["normalized"],
        "input_semantics": profile["input_semantics"],
    }
    return s.EmbeddingSpace(
        space_id=f"es-{digest(identity)[:16]}",
        dimension=int(profile["dimension"]),
        normalized=profile["normalized"] == "true",
        input_semantics=profile["input_semantics"],
        truncatable_dimensions=truncatable(profile),
    )


def plan_promotion(facts: PromotionFacts) -> Promotion:
    approval = facts.approval
    if approval is None or approval.kind != "production" or approval.candidate_id != facts.candidate_id:
        raise ServingError(
            "PRODUCTION_APPROVAL_NOT_FOUND", "no production approval of this candidate", "approval_id"
        )
    if approval.status != "approved":
        raise ServingError(
            "PRODUCTION_APPROVAL_STALE",
            f"the production approval is {approval.status}",
            details={"changed_facts": list(approval.stale_facts)},
        )
    if not facts.contract_known:
        raise ServingError("CAPABILITY_NOT_FOUND", "the approved contract is not registered", http_status=409)
    assert facts.current is not None
    assert facts.candidate is not None
    if fingerprint(facts.current) != approval.evidence_fingerprint:
        changed = changed_facts(approval.evidence, facts.current)
        raise ServingError(
            "PRODUCTION_APPROVAL_STALE",
            f"facts changed since the approval: {', '.join(changed)}",
            details={"changed_facts": list(changed)},
        )
    if facts.failures:
        raise refusal(list(facts.failures))
    candidate, artifacts, probe, node = facts.candidate, facts.artifacts, facts.probe, facts.node
    assert artifacts is not None
    assert probe is not None
    assert probe.result is not None
    assert node is not None
    if node.accelerator(probe.accelerator_id) is None:
        raise ServingError(
            "NO_ELIGIBLE_NODE", "the probed accelerator is no longer on the node", http_status=409
        )
    space = embedding_space(candidate, artifacts)
    config = candidate.deployment_config
    residency = residency_policy(config)
    replicas, placement = scaling(config)
    model_name = config.get("model_name") or artifacts.name
    identity = {
        "candidate": candidate.candidate_id,
        "approval": approval.approval_id,
        "contract": candidate.capability,
        "space": space.space_id if space else "",
        "artifact_set": artifacts.artifact_set_id,
        "runtime_profile": digest(candidate.runtime_profile),
        "node": node.node_id,
        "accelerator": probe.accelerator_id,
        "deployment_config": config,
    }
    deployment_id = f"dep-{digest(identity)[:16]}"
    stables = [d for d in facts.deployments if d.channel == "stable" and d.capability == candidate.capability]
    previous = next((d for d in reversed(stables) if d.drained), None)
    reindex = bool(space and previous and previous.embedding_space != space)
    if any(d.deployment_id == deployment_id for d in facts.deployments):
        return Promotion(deployment_id, [], space, reindex)
    blocking = [d.deployment_id for d in stables if not d.drained]
    if blocking:
        raise ServingError(
            "STABLE_DEPLOYMENT_EXISTS",
            f"{candidate.capability} already has a stable deployment ({blocking[0]}): drain it first",
            details={"deployment_id": blocking[0]},
        )
    check_model_name(model_name, facts.deployments)
    promoted = s.DeploymentPromoted(
        deployment_id=deployment_id,
        capability=candidate.capability,
        candidate_id=candidate.candidate_id,
        approval_id=approval.approval_id,
        artifact_set_id=artifacts.artifact_set_id,
        model_name=model_name,
        channel="stable",
        envelope=envelope_from_probe(probe.result),
        residency=residency,
        probe_id=probe.probe_id,
        embedding_space=space,
        max_batch_size=max_batch_size(config),
        manifest_sha256=artifacts.manifest_sha256,  # the approved one: the fingerprint matched above
        replicas=replicas,
        placement=placement,
    )
    return Promotion(deployment_id, [promoted], space, reindex)


class ExperimentFacts(msgspec.Struct, frozen=True, kw_only=True):
    route: str
    candidate: CandidateState | None
    lab_approval: ApprovalState | None
    artifacts: ArtifactSetState | None
    node: NodeState | None
    node_online: bool
    existing: DeploymentState | None  # the deployment this route names, if any
    deployments: tuple[DeploymentState, ...] = ()  # every deployment: the names routes must avoid


def experiment_id(capability: str, route: str) -> str:
    return f"exp-{digest({'contract': capability, 'route': route})[:16]}"


def plan_experiment(facts: ExperimentFacts, now: datetime) -> list[Event]:
    if facts.existing is not None:
        return []  # the route exists: unchanged, before any gate (reference §9.6)
    check_route(facts.route, facts.deployments)
    cand, approval = facts.candidate, facts.lab_approval
    if cand is None or cand.status != "lab_ready":
        raise ServingError("CANDIDATE_NOT_LAB_READY", "the candidate is not lab_ready")
    if (
        approval is None
        or approval.kind != "lab_execution"
        or approval.candidate_id != cand.candidate_id
        or not approval.usable(now)
    ):
        raise ServingError("LAB_APPROVAL_STALE", "the lab approval is missing, revoked or expired")
    probes = [
        p
        for p in cand.probes.values()
        if p.lab_approval_id == approval.approval_id and p.status == "completed"
    ]
    probe = max(probes, key=lambda p: p.finished_seq, default=None)
    node = facts.node
    if probe is None or probe.result is None or node is None or not node.enabled or not facts.node_online:
        raise ServingError(
            "CANDIDATE_EVIDENCE_STALE", "no completed probe under this approval on a live node"
        )
    if not probe.result.output_valid:
        raise ServingError("INVALID_OUTPUT", "the probe's test inference broke the contract", http_status=409)
    if node.accelerator(probe.accelerator_id) is None:
        raise ServingError("NO_ELIGIBLE_NODE", "the probed accelerator is gone", http_status=409)
    assert facts.artifacts is not None
    deployment_id = experiment_id(cand.capability, facts.route)
    return [
        s.ExperimentCreated(
            deployment_id=deployment_id,
            capability=cand.capability,
            candidate_id=cand.candidate_id,
            artifact_set_id=cand.artifact_set_id,
            model_name=facts.route,
            route=facts.route,
            envelope=envelope_from_probe(probe.result),
            embedding_space=embedding_space(cand, facts.artifacts),
            probe_id=probe.probe_id,
            manifest_sha256=facts.artifacts.manifest_sha256,
        )
    ]
