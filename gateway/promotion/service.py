"""The promotion pipeline's command side: artifact sets, candidates and probes, approvals,
promotion and experiments. Each command loads its aggregate, decides, and appends with the
loaded version (see `Aggregates.execute`); agent work (verify, probe) is a job on MF_WORK whose
outcome event is awaited on the aggregate.

Staleness is eager: after any command that can change a fingerprinted fact, every approved
production approval is re-fingerprinted and marked stale where its facts moved.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from pathlib import Path

import msgspec

from gateway.promotion import commands as cmd
from gateway.promotion.aggregates import Aggregates, checked_id
from gateway.promotion.decide import decide_approval, decide_artifact_set, decide_candidate
from gateway.promotion.deploy import (
    ExperimentFacts,
    PromotionFacts,
    experiment_id,
    plan_experiment,
    plan_promotion,
)
from gateway.promotion.evidence import Evidence, approval_id_for, fingerprint, gather
from gateway.promotion.gates import GateFacts, compatibility, production_gates
from gateway.promotion.importer import import_directory
from gateway.promotion.model import (
    ApprovalState,
    ArtifactSetState,
    CandidateState,
    DeploymentState,
    NodeState,
)
from gateway.promotion.waiting import next_event
from gateway.serving.context import ServingContext
from gateway.serving.jobs import publish_job
from nodeagent.artifacts.registration import registration
from streams.codes import ServingError
from streams.contracts import CONTRACTS
from streams.envelope import Actor, new_id
from streams.events import Event
from streams.events import control as c
from streams.messages import ProbeJob, VerifyJob
from streams.subjects import Aggregate

A = Aggregate


class Outcome(msgspec.Struct, frozen=True):
    """What a command did: the events it appended (none: nothing changed) and the version after."""

    events: list[Event]
    version: int


class PromotionService:
    def __init__(self, ctx: ServingContext, actor: Actor, *, job_timeout_s: float = 180.0) -> None:
        self.ctx = ctx
        self.aggregates = Aggregates(ctx.store, actor)
        self.actor = actor
        self.job_timeout_s = job_timeout_s

    @property
    def now(self) -> datetime:
        return self.aggregates.clock()

    async def settle(self) -> None:
        """Read-your-writes for the live view: wait until it has applied this service's appends."""
        if self.aggregates.last_sequence:
            await self.ctx.live.wait_applied(self.aggregates.last_sequence, timeout=10.0)

    # ---- artifact sets --------------------------------------------------------------------

    async def import_artifacts(
        self, source: Path, artifact_root: Path, name: str, capability: str, node_id: str
    ) -> ArtifactSetState:
        node = await self._node(node_id)
        if capability not in CONTRACTS:
            raise ServingError("UNKNOWN_CAPABILITY", f"unknown capability {capability!r}", "capability")
        manifest = await asyncio.to_thread(import_directory, source, artifact_root, name)
        event = registration(
            manifest,
            set_id=f"as-{name}",
            name=name,
            capability=capability,
            node_id=node.node_id,
            folder=name,
            source=f"import:{source}",
        )
        await self.aggregates.execute(
            A.ARTIFACT_SET, event.artifact_set_id, decide_artifact_set, cmd.RegisterArtifactSet(event)
        )
        await self.refresh_staleness()
        return await self._artifacts(event.artifact_set_id)

    async def verify_artifacts(self, artifact_set_id: str) -> ArtifactSetState:
        """Have the set's node agent check every file; returns the set with the agent's verdict."""
        arts, version = await self.aggregates.load(A.ARTIFACT_SET, artifact_set_id)
        if arts is None:
            raise _unknown_set(artifact_set_id)
        node = await self._node(arts.node_id)
        if not node.accelerators:
            raise ServingError(
                "NO_ELIGIBLE_NODE", f"node {node.node_id} has no accelerators", http_status=409
            )
        job = VerifyJob(
            job_id=new_id(),
            node_id=node.node_id,
            deployment_id=f"verify-{new_id()[:12]}",
            accelerator_id=node.accelerators[0].accelerator_id,
            requested_by=str(self.actor),
            artifact_set_id=arts.artifact_set_id,
            artifact_root=arts.root,
            manifest=[msgspec.to_builtins(f) for f in arts.files],
            manifest_sha256=arts.manifest_sha256,
        )
        await publish_job(self.ctx, job, "verify")
        await next_event(
            self.ctx.client,
            A.ARTIFACT_SET,
            arts.artifact_set_id,
            version,
            lambda e: isinstance(e, c.ArtifactSetVerified | c.ArtifactSetVerificationFailed),
            self.job_timeout_s,
            "verification",
        )
        await self.refresh_staleness()
        return await self._artifacts(artifact_set_id)

    async def quarantine(self, artifact_set_id: str, reason: str) -> ArtifactSetState:
        command = cmd.QuarantineArtifactSet(artifact_set_id, reason)
        await self.aggregates.execute(A.ARTIFACT_SET, artifact_set_id, decide_artifact_set, command)
        await self.refresh_staleness()
        return await self._artifacts(artifact_set_id)

    # ---- candidates and probes ------------------------------------------------------------

    async def create_candidate(
        self,
        candidate_id: str,
        capability: str,
        artifact_set_id: str,
        runtime_profile: dict[str, str],
        deployment_config: dict[str, str],
    ) -> CandidateState:
        arts = await self.aggregates.get(A.ARTIFACT_SET, artifact_set_id)
        command = cmd.CreateCandidate(
            candidate_id=checked_id(candidate_id, "candidate id"),
            capability=capability,
            artifact_set_id=artifact_set_id,
            runtime_profile=runtime_profile,
            deployment_config=deployment_config,
            artifact_capability=arts.capability if arts else None,
            artifact_quarantined=bool(arts and arts.quarantined),
        )
        await self.aggregates.execute(A.CANDIDATE, candidate_id, decide_candidate, command)
        return await self._candidate(candidate_id)

    async def approve_lab(
        self, candidate_id: str, node_ids: tuple[str, ...], expires_at: datetime
    ) -> ApprovalState:
        candidate = await self.aggregates.get(A.CANDIDATE, candidate_id)
        approval_id = f"la-{new_id()[:20]}"
        command = cmd.ApproveLabExecution(
            approval_id, candidate_id, candidate is not None, node_ids, expires_at
        )
        await self.aggregates.execute(A.APPROVAL, approval_id, decide_approval, command)
        return await self._approval(approval_id)

    async def probe(
        self,
        candidate_id: str,
        lab_approval_id: str,
        node_id: str | None = None,
        accelerator_id: str | None = None,
    ) -> CandidateState:
        """Run a runtime probe on a node and wait for its outcome; a probe with complete evidence
        makes the candidate lab_ready."""
        candidate = await self._candidate(candidate_id)
        arts = await self._artifacts(candidate.artifact_set_id)
        node = await self._node(node_id or arts.node_id)
        accelerator = accelerator_id or (node.accelerators[0].accelerator_id if node.accelerators else "")
        if node.accelerator(accelerator) is None:
            raise ServingError(
                "NO_ELIGIBLE_NODE", f"no accelerator {accelerator!r} on {node.node_id}", http_status=409
            )
        approval = await self.aggregates.get(A.APPROVAL, checked_id(lab_approval_id, "lab approval id"))
        probe_id = new_id()
        command = cmd.RequestProbe(
            probe_id=probe_id,
            node_id=node.node_id,
            accelerator_id=accelerator,
            lab_approval=approval,
            lab_approval_id=lab_approval_id,
            artifact_quarantined=arts.quarantined,
        )
        _, version = await self.aggregates.execute(A.CANDIDATE, candidate_id, decide_candidate, command)
        job = ProbeJob(
            job_id=probe_id,
            node_id=node.node_id,
            deployment_id=f"probe-{probe_id[:12]}",
            accelerator_id=accelerator,
            requested_by=str(self.actor),
            probe_id=probe_id,
            candidate_id=candidate_id,
            artifact_set_id=arts.artifact_set_id,
            capability=candidate.capability,
            artifact_root=arts.root,
            manifest=[msgspec.to_builtins(f) for f in arts.serving_files()],
        )
        await publish_job(self.ctx, job, "probe")
        await next_event(
            self.ctx.client,
            A.CANDIDATE,
            candidate_id,
            version,
            lambda e: isinstance(e, c.ProbeCompleted | c.ProbeFailed) and e.probe_id == probe_id,
            self.job_timeout_s,
            "probe outcome",
        )
        await self.aggregates.execute(A.CANDIDATE, candidate_id, decide_candidate, cmd.MarkLabReady(probe_id))
        return await self._candidate(candidate_id)

    # ---- production approval --------------------------------------------------------------

    async def gate_facts(
        self, candidate_id: str, probe_id: str | None
    ) -> tuple[GateFacts, CandidateState | None]:
        candidate: CandidateState | None = await self.aggregates.get(A.CANDIDATE, candidate_id)
        if candidate is None:
            empty = GateFacts(
                candidate=None, probe=None, artifacts=None, node=None, node_online=False,
                already_production=False, contract_known=False,
            )  # fmt: skip
            return empty, None
        probe = candidate.probe(probe_id if probe_id is not None else candidate.lab_ready_probe)
        arts = await self.aggregates.get(A.ARTIFACT_SET, candidate.artifact_set_id)
        node_id = probe.node_id if probe else arts.node_id if arts else ""
        node = await self.aggregates.get(A.NODE, node_id) if node_id else None
        facts = GateFacts(
            candidate=candidate,
            probe=probe,
            artifacts=arts,
            node=node,
            node_online=bool(node and self.ctx.live.node_live(node.node_id)),
            already_production=await self._in_production(candidate_id),
            contract_known=candidate.capability in CONTRACTS,
        )
        return facts, candidate

    def _evidence(self, facts: GateFacts, candidate: CandidateState, review: str) -> Evidence:
        return gather(candidate, facts.artifacts, facts.node, facts.probe, compatibility(facts), review)

    async def approve_production(
        self, candidate_id: str, *, probe_id: str | None = None, review: str = ""
    ) -> ApprovalState:
        """Gates in order, then an approval bound to the evidence fingerprint; the same facts
        approved twice give the same approval."""
        facts, candidate = await self.gate_facts(candidate_id, probe_id)
        if candidate is None:
            raise ServingError(
                "CANDIDATE_NOT_LAB_READY", "unknown candidate", "candidate_id", http_status=409
            )
        evidence = self._evidence(facts, candidate, review)
        approval_id = approval_id_for(fingerprint(evidence))
        # Its own deployment does not make a candidate "already in production" for the approval
        # it was promoted under: approving those same facts again returns that approval.
        facts = msgspec.structs.replace(
            facts, already_production=await self._in_production(candidate_id, except_approval=approval_id)
        )
        failures = tuple(production_gates(facts))
        command = cmd.ApproveProduction(candidate_id, evidence, failures)
        await self.aggregates.execute(A.APPROVAL, approval_id, decide_approval, command)
        return await self._approval(approval_id)

    async def revoke(self, approval_id: str, reason: str) -> ApprovalState:
        await self.aggregates.execute(
            A.APPROVAL, approval_id, decide_approval, cmd.RevokeApproval(approval_id, reason)
        )
        return await self._approval(approval_id)

    async def current_evidence(self, approval: ApprovalState) -> tuple[Evidence | None, GateFacts]:
        probe_id = _fact(approval.evidence, "probe")
        facts, candidate = await self.gate_facts(approval.candidate_id, probe_id)
        review = msgspec.json.decode(approval.evidence.get("supply_chain", "{}")).get("review", "")
        return (self._evidence(facts, candidate, review) if candidate else None), facts

    async def refresh_staleness(self) -> list[str]:
        """Mark stale every approved production approval whose facts moved; returns their ids."""
        marked = []
        approvals: dict[str, ApprovalState] = await self.aggregates.all(A.APPROVAL)
        for approval in approvals.values():
            if approval.kind != "production" or approval.status != "approved":
                continue
            current, _ = await self.current_evidence(approval)
            if current is None:
                continue
            command = cmd.MarkApprovalStale(approval.approval_id, current)
            events, _ = await self.aggregates.execute(
                A.APPROVAL, approval.approval_id, decide_approval, command
            )
            if events:
                marked.append(approval.approval_id)
        return marked

    # ---- promotion and experiments --------------------------------------------------------

    async def deployments(self) -> list[DeploymentState]:
        return list((await self.aggregates.all(A.DEPLOYMENT)).values())

    async def promote(self, candidate_id: str, approval_id: str) -> tuple[DeploymentState, bool, bool]:
        """(deployment, created, reindex_required). Re-promoting the same config returns it."""
        approval = await self.aggregates.get(A.APPROVAL, checked_id(approval_id, "approval id"))
        probe_id = _fact(approval.evidence, "probe") if approval else None
        facts, candidate = await self.gate_facts(candidate_id, probe_id)
        current = None
        if approval is not None and candidate is not None:
            current, _ = await self.current_evidence(approval)
        contract = candidate.capability if candidate else ""
        all_deployments = await self.deployments()
        # Promoting this approval again returns the deployment it made (not "already in production").
        facts = msgspec.structs.replace(
            facts, already_production=await self._in_production(candidate_id, except_approval=approval_id)
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
            await self._append_new(A.DEPLOYMENT, plan.deployment_id, plan.events)
        await self.settle()
        return await self._deployment(plan.deployment_id), bool(plan.events), plan.reindex_required

    async def create_experiment(self, candidate_id: str, lab_approval_id: str, route: str) -> DeploymentState:
        candidate: CandidateState | None = await self.aggregates.get(A.CANDIDATE, candidate_id)
        capability = candidate.capability if candidate else ""
        deployment_id = experiment_id(capability, route)
        arts = await self.aggregates.get(A.ARTIFACT_SET, candidate.artifact_set_id) if candidate else None
        approval = await self.aggregates.get(A.APPROVAL, checked_id(lab_approval_id, "lab approval id"))
        probes = [
            p
            for p in (candidate.probes.values() if candidate else ())
            if p.lab_approval_id == lab_approval_id
        ]
        node_id = probes[-1].node_id if probes else arts.node_id if arts else ""
        node = await self.aggregates.get(A.NODE, node_id) if node_id else None
        facts = ExperimentFacts(
            route=route,
            candidate=candidate,
            lab_approval=approval,
            artifacts=arts,
            node=node,
            node_online=bool(node and self.ctx.live.node_live(node.node_id)),
            existing=await self.aggregates.get(A.DEPLOYMENT, deployment_id),
        )
        events = plan_experiment(facts, self.now)
        if events:
            await self._append_new(A.DEPLOYMENT, deployment_id, events)
        await self.settle()
        return await self._deployment(deployment_id)

    # ---- helpers --------------------------------------------------------------------------

    async def _in_production(self, candidate_id: str, except_approval: str = "") -> bool:
        return any(
            d.candidate_id == candidate_id
            and d.channel == "stable"
            and not d.drained
            and (not except_approval or d.approval_id != except_approval)
            for d in await self.deployments()
        )

    async def _append_new(self, aggregate: Aggregate, aggregate_id: str, events: list[Event]) -> None:
        from eventstore.errors import ConcurrencyConflict
        from eventstore.store import ExpectedVersion

        try:
            version = await self.ctx.store.append(
                aggregate, aggregate_id, events, ExpectedVersion.NO_STREAM, actor=self.actor
            )
        except ConcurrencyConflict:
            return  # the same identity was created concurrently: it exists, which is what was asked
        self.aggregates.last_sequence = max(self.aggregates.last_sequence, version)

    async def _node(self, node_id: str) -> NodeState:
        node = await self.aggregates.get(A.NODE, checked_id(node_id, "node id"))
        if node is None:
            raise ServingError("NO_ELIGIBLE_NODE", f"no node {node_id!r}", "node_id", http_status=404)
        return node  # type: ignore[no-any-return]

    async def _artifacts(self, artifact_set_id: str) -> ArtifactSetState:
        arts = await self.aggregates.get(A.ARTIFACT_SET, artifact_set_id)
        if arts is None:
            raise _unknown_set(artifact_set_id)
        return arts  # type: ignore[no-any-return]

    async def _candidate(self, candidate_id: str) -> CandidateState:
        candidate = await self.aggregates.get(A.CANDIDATE, candidate_id)
        if candidate is None:
            raise ServingError(
                "CANDIDATE_NOT_LAB_READY", "unknown candidate", "candidate_id", http_status=404
            )
        return candidate  # type: ignore[no-any-return]

    async def _approval(self, approval_id: str) -> ApprovalState:
        approval = await self.aggregates.get(A.APPROVAL, approval_id)
        if approval is None:
            raise ServingError("PRODUCTION_APPROVAL_NOT_FOUND", "unknown approval", "approval_id")
        return approval  # type: ignore[no-any-return]

    async def _deployment(self, deployment_id: str) -> DeploymentState:
        deployment = await self.aggregates.get(A.DEPLOYMENT, deployment_id)
        if deployment is None:
            raise ServingError("DEPLOYMENT_NOT_FOUND", f"no deployment {deployment_id!r}", "deployment_id")
        return deployment  # type: ignore[no-any-return]


def _fact(evidence: dict[str, str], name: str) -> str | None:
    raw = evidence.get(name)
    return str(msgspec.json.decode(raw)) if raw else None


def _unknown_set(artifact_set_id: str) -> ServingError:
    return ServingError(
        "ARTIFACT_INCOMPLETE", f"no artifact set {artifact_set_id!r}", "artifact_set_id", http_status=404
    )
