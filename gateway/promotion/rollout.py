"""Rolling candidates out on the command side: promotion to the stable channel under a production
approval, and lab experiment routes under a lab approval. The plans are `deploy.py`'s; a
deployment's identity is derived, so planning the same thing twice returns the first."""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from gateway.deployments.model import DeploymentState
from gateway.promotion.aggregates import checked_id
from gateway.promotion.approvals import approved_probe, current_evidence, gate_facts, serves_stable
from gateway.promotion.context import PromotionContext
from gateway.promotion.deploy import (
    ExperimentFacts,
    Promotion,
    PromotionFacts,
    experiment_id,
    plan_experiment,
    plan_promotion,
)
from gateway.promotion.gates import production_gates
from gateway.promotion.model import CandidateState
from streams.contracts import CONTRACTS
from streams.events import Event
from streams.subjects import Aggregate

A = Aggregate


async def promote(
    p: PromotionContext, candidate_id: str, approval_id: str
) -> tuple[DeploymentState, bool, bool]:
    """(deployment, created, reindex_required). Re-promoting the same config returns it.

    Decided against every deployment and appended only if none changed meanwhile (two operators
    promoting at once: the later one is decided again and finds the other's stable deployment)."""
    approval = await p.aggregates.get(A.APPROVAL, checked_id(approval_id, "approval id"))
    probe_id = approved_probe(approval) if approval else None
    facts, candidate = await gate_facts(p, candidate_id, probe_id)
    current = None
    if approval is not None and candidate is not None:
        current, _ = await current_evidence(p, approval)
    contract = candidate.capability if candidate else ""
    plans: list[Promotion] = []

    def plan(states: Mapping[str, DeploymentState]) -> tuple[str, list[Event]]:
        # Promoting this approval again returns the deployment it made (not "already in production").
        gates = msgspec.structs.replace(
            facts,
            already_production=serves_stable(states.values(), candidate_id, except_approval=approval_id),
        )
        decided = plan_promotion(
            PromotionFacts(
                candidate_id=candidate_id,
                approval=approval,
                candidate=candidate,
                artifacts=facts.artifacts,
                probe=facts.probe,
                node=facts.node,
                current=current,
                failures=tuple(production_gates(gates)) if candidate else (),
                contract_known=contract in CONTRACTS,
                deployments=tuple(states.values()),
            )
        )
        plans.append(decided)
        return decided.deployment_id, decided.events

    deployment_id = await p.aggregates.create_unique(A.DEPLOYMENT, plan)
    await p.settle()
    return await p.deployment(deployment_id), bool(plans[-1].events), plans[-1].reindex_required


async def create_experiment(
    p: PromotionContext, candidate_id: str, lab_approval_id: str, route: str
) -> DeploymentState:
    """Decided against every deployment (its route must not name a stable model) and appended
    only if none changed meanwhile."""
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

    def plan(states: Mapping[str, DeploymentState]) -> tuple[str, list[Event]]:
        facts = ExperimentFacts(
            route=route,
            candidate=candidate,
            lab_approval=approval,
            artifacts=arts,
            node=node,
            node_online=node_online,
            existing=states.get(deployment_id),
            deployments=tuple(states.values()),
        )
        return deployment_id, plan_experiment(facts, p.now)

    await p.aggregates.create_unique(A.DEPLOYMENT, plan)
    await p.settle()
    return await p.deployment(deployment_id)
