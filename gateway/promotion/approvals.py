"""Approvals on the command side: lab execution, production (the gates, then an approval bound to
the fingerprint of its evidence), revocation, and staleness.

Staleness is eager: after any command that can change a fingerprinted fact, every approved
production approval is re-fingerprinted and marked stale where its facts moved.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

import msgspec

from gateway.deployments.model import DeploymentState
from gateway.promotion import commands as cmd
from gateway.promotion.context import PromotionContext
from gateway.promotion.decide import candidate_not_found, decide_approval
from gateway.promotion.evidence import Evidence, approval_id_for, fingerprint, gather
from gateway.promotion.gates import GateFacts, compatibility, production_gates
from gateway.promotion.model import ApprovalState, CandidateState
from streams.contracts import CONTRACTS
from streams.envelope import new_id
from streams.subjects import Aggregate

A = Aggregate


async def approve_lab(
    p: PromotionContext, candidate_id: str, node_ids: tuple[str, ...], expires_at: datetime
) -> ApprovalState:
    candidate = await p.aggregates.get(A.CANDIDATE, candidate_id)
    approval_id = f"la-{new_id()[:20]}"
    command = cmd.ApproveLabExecution(approval_id, candidate_id, candidate is not None, node_ids, expires_at)
    await p.aggregates.execute(A.APPROVAL, approval_id, decide_approval, command)
    return await p.approval(approval_id)


async def gate_facts(
    p: PromotionContext, candidate_id: str, probe_id: str | None
) -> tuple[GateFacts, CandidateState | None]:
    candidate: CandidateState | None = await p.aggregates.get(A.CANDIDATE, candidate_id)
    if candidate is None:
        empty = GateFacts(
            candidate=None, probe=None, artifacts=None, node=None, node_online=False,
            already_production=False, contract_known=False,
        )  # fmt: skip
        return empty, None
    probe = candidate.probe(probe_id if probe_id is not None else candidate.lab_ready_probe)
    arts = await p.aggregates.get(A.ARTIFACT_SET, candidate.artifact_set_id)
    node, node_online = await p.node_judged(probe, arts)
    facts = GateFacts(
        candidate=candidate,
        probe=probe,
        artifacts=arts,
        node=node,
        node_online=node_online,
        already_production=await in_production(p, candidate_id),
        contract_known=candidate.capability in CONTRACTS,
    )
    return facts, candidate


def _evidence(facts: GateFacts, candidate: CandidateState, review: str) -> Evidence:
    return gather(candidate, facts.artifacts, facts.node, facts.probe, compatibility(facts), review)


class ApprovalRecord(msgspec.Struct, frozen=True, kw_only=True):
    """What the operator records with a production approval (each required, non-empty)."""

    review: str  # the supply-chain review: part of the evidence, so of the fingerprint
    reason: str
    approved_by: str


async def approve_production(
    p: PromotionContext, candidate_id: str, record: ApprovalRecord, *, probe_id: str | None = None
) -> ApprovalState:
    """Gates in order, then an approval bound to the evidence fingerprint; the same facts
    approved twice give the same approval."""
    facts, candidate = await gate_facts(p, candidate_id, probe_id)
    if candidate is None:
        raise candidate_not_found(candidate_id)
    evidence = _evidence(facts, candidate, record.review)
    approval_id = approval_id_for(fingerprint(evidence))
    # Its own deployment does not make a candidate "already in production" for the approval
    # it was promoted under: approving those same facts again returns that approval.
    facts = msgspec.structs.replace(
        facts, already_production=await in_production(p, candidate_id, except_approval=approval_id)
    )
    failures = tuple(production_gates(facts))
    command = cmd.ApproveProduction(candidate_id, evidence, failures, record.approved_by, record.reason)
    await p.aggregates.execute(A.APPROVAL, approval_id, decide_approval, command)
    return await p.approval(approval_id)


async def revoke(p: PromotionContext, approval_id: str, reason: str) -> ApprovalState:
    await p.aggregates.execute(
        A.APPROVAL, approval_id, decide_approval, cmd.RevokeApproval(approval_id, reason)
    )
    return await p.approval(approval_id)


async def current_evidence(p: PromotionContext, approval: ApprovalState) -> tuple[Evidence | None, GateFacts]:
    """The approval's evidence recomputed from today's facts (None: its candidate is gone)."""
    facts, candidate = await gate_facts(p, approval.candidate_id, approved_probe(approval))
    review = msgspec.json.decode(approval.evidence.get("supply_chain", "{}")).get("review", "")
    return (_evidence(facts, candidate, review) if candidate else None), facts


async def refresh_staleness(p: PromotionContext) -> list[str]:
    """Mark stale every approved production approval whose facts moved; returns their ids."""
    marked = []
    approvals: dict[str, ApprovalState] = await p.aggregates.all(A.APPROVAL)
    for approval in approvals.values():
        if approval.kind != "production" or approval.status != "approved":
            continue
        current, _ = await current_evidence(p, approval)
        if current is None:
            continue
        command = cmd.MarkApprovalStale(approval.approval_id, current)
        events, _ = await p.aggregates.execute(A.APPROVAL, approval.approval_id, decide_approval, command)
        if events:
            marked.append(approval.approval_id)
    return marked


async def in_production(p: PromotionContext, candidate_id: str, except_approval: str = "") -> bool:
    return serves_stable(await p.deployments(), candidate_id, except_approval)


def serves_stable(
    deployments: Iterable[DeploymentState], candidate_id: str, except_approval: str = ""
) -> bool:
    """Whether the candidate has a stable deployment not drained (other than `except_approval`'s)."""
    return any(
        d.candidate_id == candidate_id
        and d.channel == "stable"
        and not d.drained
        and (not except_approval or d.approval_id != except_approval)
        for d in deployments
    )


def approved_probe(approval: ApprovalState) -> str | None:
    """The probe a production approval rests on, from its recorded evidence."""
    raw = approval.evidence.get("probe")
    return str(msgspec.json.decode(raw)) if raw else None
