"""Rolling candidates out on the command side: promotion to the stable channel under a production
approval, and lab experiment routes under a lab approval. The plans are `deploy.py`'s; a
deployment's identity is derived, so planning the same thing twice returns the first."""

from __future__ import annotations

import msgspec

from gateway.promotion.aggregates import checked_id
from gateway.promotion.approvals import approved_probe, current_evidence, gate_facts, in_production
from gateway.promotion.context import PromotionContext
from gateway.promotion.deploy import (
    ExperimentFacts,
    PromotionFacts,
    experiment_id,
    plan_experiment,
    plan_promotion,
)
from gateway.promotion.gates import production_gates
from gateway.promotion.model import CandidateState, DeploymentState
from streams.contracts import CONTRACTS
from streams.subjects import Aggregate

A = Aggregate


async def promote(
    p: PromotionContext, candidate_id: str, approval_id: str
) -> tuple[DeploymentState, bool, bool]:
    """(deployment, created, reindex_required). Re-promoting the same config returns it."""
    approval = await p.aggregates.get(A.APPROVAL, checked_id(approval_id, "approval id"))
    probe_id = approved_probe(approval) if approval else None
    facts, candidate = await gate_facts(p, candidate_id, probe_id)
    current = None
    if approval is not None and candidate is not None:
        current, _ = await current_evidence(p, approval)
    contract = candidate.capability if candidate else ""
    all_deployments = await p.deployments()
    # Promoting this approval again returns the deployment it made (not "already in production").
    facts = msgspec.structs.replace(
        facts, already_production=await in_production(p, candidate_id, except_approval=approval_id)
    )
    plan = plan_promotion(
        PromotionFacts(
            candidate_id=candidate_id,
            approval=approval,
            candidate=candidate,
            artifacts=facts.artifacts,
            probe=facts.probe,
            node=facts.node,
            current=current,
            failures=tuple(production_gates(facts)) if candidate else (),
            contract_known=contract in CONTRACTS,
            deployments=tuple(d for d in all_deployments if d.capability == contract),
        )
    )
    if plan.events:
        await p.aggregates.create(A.DEPLOYMENT, plan.deployment_id, plan.events)
    await p.settle()
    return await p.deployment(plan.deployment_id), bool(plan.events), plan.reindex_required


async def create_experiment(
    p: PromotionContext, candidate_id: str, lab_approval_id: str, route: str
) -> DeploymentState:
    candidate: CandidateState | None = await p.aggregates.get(A.CANDIDATE, candidate_id)
    capability = candidate.capability if candidate else ""
    deployment_id = experiment_id(capability, route)
    arts = await p.aggregates.get(A.ARTIFACT_SET, candidate.artifact_set_id) if candidate else None
    approval = await p.aggregates.get(A.APPROVAL, checked_id(lab_approval_id, "lab approval id"))
    probes = [
        probe
        for probe in (candidate.probes.values() if candidate else ())
        if probe.lab_approval_id == lab_approval_id
    ]
    node, node_online = await p.node_judged(probes[-1] if probes else None, arts)
    facts = ExperimentFacts(
        route=route,
        candidate=candidate,
        lab_approval=approval,
        artifacts=arts,
        node=node,
        node_online=node_online,
        existing=await p.aggregates.get(A.DEPLOYMENT, deployment_id),
    )
    events = plan_experiment(facts, p.now)
    if events:
        await p.aggregates.create(A.DEPLOYMENT, deployment_id, events)
    await p.settle()
    return await p.deployment(deployment_id)
