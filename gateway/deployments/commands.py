"""Commands on a deployment: what an operator asks of one (drain, residency, an experiment's
routing), before it is decided (`gateway.deployments.decide`)."""

from __future__ import annotations

import msgspec

from streams.events import serving as s


class DrainDeployment(msgspec.Struct, frozen=True):
    deployment_id: str
    active_requests: int
    reason: str = ""


class CompleteDrain(msgspec.Struct, frozen=True):
    deployment_id: str


class ChangeResidency(msgspec.Struct, frozen=True):
    deployment_id: str
    residency: s.ResidencyPolicy


class SetExperimentActive(msgspec.Struct, frozen=True):
    deployment_id: str
    active: bool
    reason: str = ""


class ChangeScaling(msgspec.Struct, frozen=True):
    deployment_id: str
    replicas: s.Replicas
    placement: s.PlacementKind


class ChangeCaps(msgspec.Struct, frozen=True):
    deployment_id: str
    max_concurrency: int | None = None  # None: as it is
    max_queue_depth: int | None = None


DeploymentCommand = (
    DrainDeployment | CompleteDrain | ChangeResidency | ChangeScaling | ChangeCaps | SetExperimentActive
)
