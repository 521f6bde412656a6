"""The memory envelope placement goes by for a deployment: what its probe measured, and whether
that still holds (stale, outgrown), on which hardware class, and what a cold load must fetch."""

from __future__ import annotations

from gateway.deployments.model import DeploymentState
from gateway.scheduler import Channel, ModelEnvelope
from gateway.scheduler.state import HardwareClass
from gateway.state.live import LiveState


def envelope_of(
    deployment: DeploymentState,
    stale: bool = False,
    outgrown: bool = False,
    measured_on: HardwareClass | None = None,
    artifact_bytes: int = 0,
) -> ModelEnvelope:
    """`stale`: what the probe measured no longer holds (`Catalog.stale_envelope`); `outgrown`: a
    load measured more than it reserved (`LiveState.outgrown_envelope`); `measured_on`: the
    hardware class the probe ran on (`Catalog.measured_class`); `artifact_bytes`: the
    deployment's artifact set's, which a node without it fetches before a cold load."""
    env = deployment.envelope
    return ModelEnvelope(
        deployment_id=deployment.deployment_id,
        required_bytes=env.required_bytes,
        peak_bytes=env.peak_bytes,
        request_floor_bytes=env.per_request_bytes,
        channel=Channel.PRODUCTION if deployment.channel == "stable" else Channel.LAB,
        cold_load_ms=env.cold_load_ms,
        stale=stale,
        outgrown=outgrown,
        hardware_class=measured_on,
        spread=deployment.placement == "spread",
        artifact_set_id=deployment.artifact_set_id,
        artifact_bytes=artifact_bytes,
    )


def live_envelope(live: LiveState, deployment: DeploymentState) -> tuple[ModelEnvelope, str | None]:
    """The envelope placement goes by, as the live view knows it, and why it no longer holds (the
    reason a SCHEDULER_STATE_STALE refusal names), if it does not."""
    stale = live.catalog.stale_envelope(deployment)
    outgrown = live.outgrown_envelope(deployment)
    measured_on = live.catalog.measured_class(deployment)
    artifacts = live.catalog.artifact_sets.get(deployment.artifact_set_id)
    set_bytes = sum(f.size for f in artifacts.files) if artifacts else 0
    envelope = envelope_of(deployment, stale is not None, outgrown is not None, measured_on, set_bytes)
    return envelope, stale or outgrown
