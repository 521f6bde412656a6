"""Admin endpoints of the promotion pipeline: contracts, artifact sets, candidates and probes,
approvals, promotion and experiments."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Annotated

import msgspec

from artifacts.paths import ARTIFACT_ROOT_ENV
from gateway.admin import views
from gateway.admin.endpoint import ROWS, Call, Endpoint
from gateway.contracts import registered_contracts
from gateway.deployments.health import HealthStatus, health_status
from gateway.deployments.model import DeploymentState
from gateway.operations.service import Operations
from gateway.promotion import approvals, artifacts, candidates, rollout
from gateway.promotion.context import PromotionContext
from gateway.promotion.model import ApprovalState, ArtifactSetState, CandidateState
from gateway.scheduler import ResidencyState
from streams import text
from streams.codes import ServingError
from streams.subjects import Aggregate


def promotion(call: Call) -> PromotionContext:
    return PromotionContext(call.edge.ctx, call.actor)


# ---- bodies -----------------------------------------------------------------------------------


class ImportArtifacts(msgspec.Struct, frozen=True, kw_only=True):
    source: Annotated[str, text.LONG]  # a model folder on the gateway's machine
    name: str  # the set's folder name (under an artifact root); its id is `as-<name>`
    node_id: str
    capability: str = "rag.embedding@1"
    artifact_root: Annotated[str | None, text.LONG] = (
        None  # an artifact root on the gateway's machine to copy the set onto as well (default:
        # $MODELFORGE_ARTIFACT_ROOT; with neither, the set is only in the artifact bucket)
    )
    verify: bool = True  # have the node's agent verify the files at once


class Reason(msgspec.Struct, frozen=True, kw_only=True):
    reason: Annotated[str, text.REASON] = ""  # kept in every copy of the log


class CreateCandidate(msgspec.Struct, frozen=True, kw_only=True):
    candidate_id: str
    artifact_set_id: str
    capability: str | None = None  # not given: the capability the artifact set was registered for
    runtime_profile: Annotated[dict[str, str], text.LONG] = {}
    deployment_config: Annotated[dict[str, str], text.LONG] = {}


class RunProbe(msgspec.Struct, frozen=True, kw_only=True):
    lab_approval_id: str
    node_id: str | None = None
    accelerator_id: str | None = None


YEAR_S = 365 * 86_400.0


class LabApproval(msgspec.Struct, frozen=True, kw_only=True):
    candidate_id: str
    node_ids: list[str]
    # A lab approval lasts a while, not for ever (and a date past the calendar's end is no date).
    expires_in_s: Annotated[float, msgspec.Meta(gt=0, le=YEAR_S)] = 86_400.0


class ProductionApproval(msgspec.Struct, frozen=True, kw_only=True):
    candidate_id: str
    probe_id: str | None = None  # default: the probe that made the candidate lab_ready
    # Both required, non-empty (decided with the approver, x-mf-operator, in decide_approval):
    # the operator's review of where the files come from; fingerprinted
    supply_chain_review: Annotated[str, text.PROSE] = ""
    reason: Annotated[str, text.PROSE] = ""  # why production; recorded with the approval, not fingerprinted


class Promote(msgspec.Struct, frozen=True, kw_only=True):
    candidate_id: str
    approval_id: str


class CreateExperiment(msgspec.Struct, frozen=True, kw_only=True):
    candidate_id: str
    lab_approval_id: str
    route: str
    activate: bool = True


# ---- handlers ---------------------------------------------------------------------------------


async def list_contracts(call: Call) -> object:
    """The contracts as registered (`gateway.contracts`), by capability@version."""
    registered = await registered_contracts(call.edge.ctx.client)
    return [registered[capability] for capability in sorted(registered)]


async def show_contract(call: Call) -> object:
    capability = call.path["capability"]
    registered = await registered_contracts(call.edge.ctx.client)
    if capability not in registered:
        raise ServingError("CAPABILITY_NOT_FOUND", f"no contract {capability!r}", "capability")
    return registered[capability]


async def import_artifacts(call: Call) -> object:
    body: ImportArtifacts = call.body
    root_text = body.artifact_root or os.environ.get(ARTIFACT_ROOT_ENV, "")
    p = promotion(call)
    state = await artifacts.import_artifacts(
        p, Path(body.source), Path(root_text) if root_text else None, body.name, body.capability, body.node_id
    )
    if body.verify:
        state = await artifacts.verify_artifacts(p, state.artifact_set_id)
    return views.artifact_set(state)


async def list_artifacts(call: Call) -> object:
    sets: dict[str, ArtifactSetState] = await promotion(call).aggregates.all(Aggregate.ARTIFACT_SET)
    return [views.artifact_set(s) for s in sets.values()]


async def show_artifacts(call: Call) -> object:
    return views.artifact_set(await promotion(call).artifact_set(call.path["artifact_set_id"]))


async def verify_artifacts(call: Call) -> object:
    return views.artifact_set(await artifacts.verify_artifacts(promotion(call), call.path["artifact_set_id"]))


async def quarantine_artifacts(call: Call) -> object:
    body: Reason = call.body
    return views.artifact_set(
        await artifacts.quarantine(promotion(call), call.path["artifact_set_id"], body.reason)
    )


async def create_candidate(call: Call) -> object:
    b: CreateCandidate = call.body
    state = await candidates.create_candidate(
        promotion(call),
        b.candidate_id,
        b.capability,
        b.artifact_set_id,
        b.runtime_profile,
        b.deployment_config,
    )
    return views.candidate(state)


async def list_candidates(call: Call) -> object:
    states: dict[str, CandidateState] = await promotion(call).aggregates.all(Aggregate.CANDIDATE)
    return [views.candidate(s) for s in states.values()]


async def show_candidate(call: Call) -> object:
    return views.candidate(await promotion(call).candidate(call.path["candidate_id"]))


async def run_probe(call: Call) -> object:
    b: RunProbe = call.body
    state = await candidates.probe(
        promotion(call), call.path["candidate_id"], b.lab_approval_id, b.node_id, b.accelerator_id
    )
    return views.candidate(state)


async def approve_lab(call: Call) -> object:
    b: LabApproval = call.body
    p = promotion(call)
    expires = p.now + timedelta(seconds=b.expires_in_s)
    return views.approval(await approvals.approve_lab(p, b.candidate_id, tuple(b.node_ids), expires))


async def approve_production(call: Call) -> object:
    b: ProductionApproval = call.body
    record = approvals.ApprovalRecord(
        review=b.supply_chain_review, reason=b.reason, approved_by=call.operator
    )
    state = await approvals.approve_production(promotion(call), b.candidate_id, record, probe_id=b.probe_id)
    return views.approval(state)


async def list_approvals(call: Call) -> object:
    states: dict[str, ApprovalState] = await promotion(call).aggregates.all(Aggregate.APPROVAL)
    return [views.approval(s) for s in states.values()]


async def show_approval(call: Call) -> object:
    return views.approval(await promotion(call).approval(call.path["approval_id"]))


async def revoke_approval(call: Call) -> object:
    body: Reason = call.body
    return views.approval(await approvals.revoke(promotion(call), call.path["approval_id"], body.reason))


async def promote(call: Call) -> object:
    b: Promote = call.body
    deployment, created, reindex = await rollout.promote(promotion(call), b.candidate_id, b.approval_id)
    return views.deployment(deployment, created=created, reindex_required=reindex)


async def list_deployments(call: Call) -> object:
    states: list[DeploymentState] = await promotion(call).deployments()
    return [views.deployment(s, health_status=_health(call, s)) for s in states]


async def show_deployment(call: Call) -> object:
    state = await promotion(call).deployment(call.path["deployment_id"])
    return views.deployment(state, health_status=_health(call, state))


def _health(call: Call, deployment: DeploymentState) -> HealthStatus:
    """The deployment's derived health (`gateway.deployments.health`) from this gateway's live view."""
    live = call.edge.ctx.live
    taking_work = [a for a in live.schedulable_accelerators() if a.available]
    loaded = any(
        r.deployment_id == deployment.deployment_id and r.state is ResidencyState.LOADED
        for a in taking_work
        for r in a.residents
    )
    failed_check = deployment.deployment_id in live.unhealthy
    return health_status(deployment, loaded=loaded, failed_check=failed_check, placeable=bool(taking_work))


async def create_experiment(call: Call) -> object:
    b: CreateExperiment = call.body
    p = promotion(call)
    state = await rollout.create_experiment(p, b.candidate_id, b.lab_approval_id, b.route)
    if b.activate and not state.active and not state.draining:
        state = await Operations(p).set_experiment_active(state.deployment_id, True)
    return views.deployment(state)


ENDPOINTS = [
    Endpoint("GET", "/contracts", "The capability contracts and their schemas", list_contracts, tag="contracts", response=ROWS),
    Endpoint("GET", "/contracts/{capability}", "One contract", show_contract, tag="contracts"),
    Endpoint(
        "POST", "/artifact-sets/import", "Import a local model folder into the artifact bucket, register it, verify it",
        import_artifacts, ImportArtifacts, "artifacts",
    ),
    Endpoint("GET", "/artifact-sets", "Artifact sets", list_artifacts, tag="artifacts", response=ROWS),
    Endpoint("GET", "/artifact-sets/{artifact_set_id}", "One artifact set", show_artifacts, tag="artifacts"),
    Endpoint(
        "POST", "/artifact-sets/{artifact_set_id}/verify", "Have the node's agent verify the files",
        verify_artifacts, tag="artifacts",
    ),
    Endpoint(
        "POST", "/artifact-sets/{artifact_set_id}/quarantine", "Quarantine an artifact set",
        quarantine_artifacts, Reason, "artifacts",
    ),
    Endpoint("POST", "/candidates", "Register a candidate", create_candidate, CreateCandidate, "candidates"),
    Endpoint("GET", "/candidates", "Candidates", list_candidates, tag="candidates", response=ROWS),
    Endpoint("GET", "/candidates/{candidate_id}", "One candidate with its probes", show_candidate, tag="candidates"),
    Endpoint(
        "POST", "/candidates/{candidate_id}/probes", "Run a runtime probe (waits for its outcome)",
        run_probe, RunProbe, "candidates",
    ),
    Endpoint("POST", "/approvals/lab", "Approve lab execution", approve_lab, LabApproval, "approvals"),
    Endpoint(
        "POST", "/approvals/production", "Approve production (gated, bound to an evidence fingerprint)",
        approve_production, ProductionApproval, "approvals",
    ),
    Endpoint("GET", "/approvals", "Approvals", list_approvals, tag="approvals", response=ROWS),
    Endpoint("GET", "/approvals/{approval_id}", "One approval", show_approval, tag="approvals"),
    Endpoint("POST", "/approvals/{approval_id}/revoke", "Revoke an approval", revoke_approval, Reason, "approvals"),
    Endpoint("POST", "/deployments", "Promote to the stable channel", promote, Promote, "deployments"),
    Endpoint("GET", "/deployments", "Deployments", list_deployments, tag="deployments", response=ROWS),
    Endpoint("GET", "/deployments/{deployment_id}", "One deployment", show_deployment, tag="deployments"),
    Endpoint(
        "POST", "/experiments", "Create a lab experiment route", create_experiment, CreateExperiment, "deployments"
    ),
]  # fmt: skip
