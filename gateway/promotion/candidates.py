"""Candidates on the command side: register one over an artifact set, and run a runtime probe on
a real node under a lab approval; a probe with complete evidence makes the candidate lab_ready."""

from __future__ import annotations

import msgspec

from gateway.promotion import commands as cmd
from gateway.promotion.aggregates import checked_id
from gateway.promotion.context import PromotionContext
from gateway.promotion.decide import decide_candidate
from gateway.promotion.model import CandidateState
from gateway.promotion.waiting import next_event
from gateway.serving.jobs import publish_job
from streams.codes import ServingError
from streams.envelope import new_id
from streams.events import control as c
from streams.messages import ProbeJob
from streams.subjects import Aggregate

A = Aggregate


async def create_candidate(
    p: PromotionContext,
    candidate_id: str,
    capability: str | None,
    artifact_set_id: str,
    runtime_profile: dict[str, str],
    deployment_config: dict[str, str],
) -> CandidateState:
    """`capability` None: the one the artifact set was registered for."""
    arts = await p.aggregates.get(A.ARTIFACT_SET, artifact_set_id)
    command = cmd.CreateCandidate(
        candidate_id=checked_id(candidate_id, "candidate id"),
        capability=capability or (arts.capability if arts else ""),
        artifact_set_id=artifact_set_id,
        runtime_profile=runtime_profile,
        deployment_config=deployment_config,
        artifact_capability=arts.capability if arts else None,
        artifact_quarantined=bool(arts and arts.quarantined),
    )
    await p.aggregates.execute(A.CANDIDATE, candidate_id, decide_candidate, command)
    return await p.candidate(candidate_id)


async def probe(
    p: PromotionContext,
    candidate_id: str,
    lab_approval_id: str,
    node_id: str | None = None,
    accelerator_id: str | None = None,
) -> CandidateState:
    """Run a runtime probe on a node and wait for its outcome."""
    candidate = await p.candidate(candidate_id)
    arts = await p.artifact_set(candidate.artifact_set_id)
    node = await p.node(node_id or arts.node_id)
    accelerator = accelerator_id or (node.accelerators[0].accelerator_id if node.accelerators else "")
    if node.accelerator(accelerator) is None:
        raise ServingError(
            "NO_ELIGIBLE_NODE", f"no accelerator {accelerator!r} on {node.node_id}", http_status=409
        )
    approval = await p.aggregates.get(A.APPROVAL, checked_id(lab_approval_id, "lab approval id"))
    probe_id = new_id()
    command = cmd.RequestProbe(
        probe_id=probe_id,
        node_id=node.node_id,
        accelerator_id=accelerator,
        lab_approval=approval,
        lab_approval_id=lab_approval_id,
        artifact_quarantined=arts.quarantined,
        manifest_sha256=arts.manifest_sha256,  # the job below is built from this same read of the set
    )
    _, version = await p.aggregates.execute(A.CANDIDATE, candidate_id, decide_candidate, command)
    job = ProbeJob(
        job_id=probe_id,
        node_id=node.node_id,
        deployment_id=f"probe-{probe_id[:12]}",
        accelerator_id=accelerator,
        requested_by=str(p.actor),
        probe_id=probe_id,
        candidate_id=candidate_id,
        artifact_set_id=arts.artifact_set_id,
        capability=candidate.capability,
        artifact_root=arts.root,
        manifest=[msgspec.to_builtins(f) for f in arts.serving_files()],
        manifest_sha256=arts.manifest_sha256,
    )
    await publish_job(p.ctx, job, "probe")
    _, outcome_sequence = await next_event(
        p.ctx.client,
        A.CANDIDATE,
        candidate_id,
        version,
        lambda e: isinstance(e, c.ProbeCompleted | c.ProbeFailed) and e.probe_id == probe_id,
        p.job_timeout_s,
        "probe outcome",
    )
    # The agent appended it; on a cluster the replica answering the next read may not hold it yet.
    p.aggregates.store.saw(outcome_sequence)
    await p.aggregates.execute(A.CANDIDATE, candidate_id, decide_candidate, cmd.MarkLabReady(probe_id))
    return await p.candidate(candidate_id)
