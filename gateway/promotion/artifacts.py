"""Artifact sets on the command side: import a local model folder into the artifact bucket (and onto
a local artifact root, where one is named) and register it, have the node's agent verify the files, quarantine. Each can move a fingerprinted
fact, so each ends by refreshing the staleness of production approvals."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec

from artifacts.bucket import put_set
from artifacts.registration import registration
from gateway.promotion import commands as cmd
from gateway.promotion.approvals import refresh_staleness
from gateway.promotion.context import PromotionContext
from gateway.promotion.decide import decide_artifact_set
from gateway.promotion.importer import import_directory, source_manifest
from gateway.promotion.model import ArtifactSetState
from gateway.promotion.waiting import next_event
from gateway.serving.jobs import publish_job
from streams.codes import ServingError
from streams.contracts import CONTRACTS
from streams.envelope import new_id
from streams.events import control as c
from streams.messages import VerifyJob
from streams.subjects import Aggregate

A = Aggregate


async def import_artifacts(
    p: PromotionContext, source: Path, artifact_root: Path | None, name: str, capability: str, node_id: str
) -> ArtifactSetState:
    node = await p.node(node_id)
    if capability not in CONTRACTS:
        raise ServingError("UNKNOWN_CAPABILITY", f"unknown capability {capability!r}", "capability")
    manifest = await asyncio.to_thread(source_manifest, source, artifact_root, name)
    event = registration(
        manifest,
        set_id=f"as-{name}",
        name=name,
        capability=capability,
        node_id=node.node_id,
        folder=name,
        source=f"import:{source}",
    )
    command = cmd.RegisterArtifactSet(event)
    # Decided before a file is copied: a registered set's folder is never replaced with other files.
    decide_artifact_set(await p.aggregates.get(A.ARTIFACT_SET, event.artifact_set_id), command, p.now)
    await put_set(p.ctx.client, source, manifest)
    if artifact_root is not None:
        await asyncio.to_thread(import_directory, source, manifest, artifact_root, name)
    await p.aggregates.execute(A.ARTIFACT_SET, event.artifact_set_id, decide_artifact_set, command)
    await refresh_staleness(p)
    return await p.artifact_set(event.artifact_set_id)


async def verify_artifacts(p: PromotionContext, artifact_set_id: str) -> ArtifactSetState:
    """Have the set's node agent check every file; returns the set with the agent's verdict."""
    arts, version = await p.artifact_set_at(artifact_set_id)
    node = await p.node(arts.node_id)
    if not node.accelerators:
        raise ServingError("NO_ELIGIBLE_NODE", f"node {node.node_id} has no accelerators", http_status=409)
    job = VerifyJob(
        job_id=new_id(),
        node_id=node.node_id,
        deployment_id=f"verify-{new_id()[:12]}",
        accelerator_id=node.accelerators[0].accelerator_id,
        requested_by=str(p.actor),
        artifact_set_id=arts.artifact_set_id,
        artifact_root=arts.root,
        manifest=[msgspec.to_builtins(f) for f in arts.files],
        manifest_sha256=arts.manifest_sha256,
    )
    await publish_job(p.ctx, job, "verify")
    _, outcome_sequence = await next_event(
        p.ctx.client,
        A.ARTIFACT_SET,
        arts.artifact_set_id,
        version,
        lambda e: isinstance(e, c.ArtifactSetVerified | c.ArtifactSetVerificationFailed),
        p.job_timeout_s,
        "verification",
    )
    p.aggregates.store.saw(outcome_sequence)  # the agent's append: a cluster's replica may lag behind it
    await refresh_staleness(p)
    return await p.artifact_set(artifact_set_id)


async def quarantine(p: PromotionContext, artifact_set_id: str, reason: str) -> ArtifactSetState:
    command = cmd.QuarantineArtifactSet(artifact_set_id, reason)
    await p.aggregates.execute(A.ARTIFACT_SET, artifact_set_id, decide_artifact_set, command)
    await refresh_staleness(p)
    return await p.artifact_set(artifact_set_id)
