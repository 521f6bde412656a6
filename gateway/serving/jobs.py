"""Control jobs for node agents, published to MF_WORK (deduplicated by job id; sent again while the
stream elects a leader)."""

from __future__ import annotations

import msgspec

from eventstore.replies import resend_while_leaderless
from gateway.deployments.model import DeploymentState
from gateway.serving.context import ServingContext
from streams import subjects
from streams.codes import ServingError
from streams.envelope import new_id
from streams.events import serving as s
from streams.messages import AnyJob, LoadJob, UnloadJob

# MF_WORK without a leader (an election on a cluster, seconds): a job waits this long to be sent.
JOB_LEADERLESS_WAIT_S = 10.0


async def publish_job(ctx: ServingContext, job: AnyJob, op: str) -> None:
    subject, js = subjects.job_subject(job.node_id, job.deployment_id, op), ctx.client.jetstream()
    await resend_while_leaderless(
        lambda: js.publish(subject, msgspec.json.encode(job), headers={"Nats-Msg-Id": job.job_id}),
        JOB_LEADERLESS_WAIT_S,
    )


async def publish_load(
    ctx: ServingContext, load: s.ResidencyLoadRequested, deployment: DeploymentState
) -> None:
    artifacts = ctx.live.catalog.artifact_sets.get(deployment.artifact_set_id)
    if artifacts is None:
        raise ServingError(
            "ARTIFACT_INCOMPLETE", f"artifact set {deployment.artifact_set_id} is not registered"
        )
    # Routing already passes such a deployment by; this holds for one resolved just before.
    unservable = ctx.live.catalog.unservable(deployment)
    if unservable:
        raise ServingError("ARTIFACT_NOT_VERIFIED", f"not loading: {unservable}", http_status=503)
    job = LoadJob(
        job_id=new_id(),
        node_id=load.node_id,
        deployment_id=load.deployment_id,
        accelerator_id=load.accelerator_id,
        requested_by=str(ctx.actor),
        load_id=load.load_id,
        artifact_set_id=artifacts.artifact_set_id,
        capability=deployment.capability,
        artifact_root=artifacts.root,
        manifest=[msgspec.to_builtins(f) for f in artifacts.files],
        max_batch_size=deployment.max_batch_size,
    )
    await publish_job(ctx, job, "load")


async def publish_unload(
    ctx: ServingContext, node_id: str, accelerator_id: str, deployment_id: str, reason: str, job_id: str = ""
) -> None:
    """`job_id`: derived from what asks for the unload, so that sending it again is dropped as a
    duplicate (a fresh one by default)."""
    job = UnloadJob(
        job_id=job_id or new_id(),
        node_id=node_id,
        deployment_id=deployment_id,
        accelerator_id=accelerator_id,
        requested_by=str(ctx.actor),
        reason=reason,
    )
    await publish_job(ctx, job, "unload")
