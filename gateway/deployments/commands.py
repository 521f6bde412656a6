"""Commands on a deployment: what an operator asks of one (drain, residency, an experiment's
routing), before it is decided (`gateway.deployments.decide`)."""

from __future__ import annotations

import msgspec

from streams.events import releases as r
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


class ChangeRoutingWeights(msgspec.Struct, frozen=True):
    """On the capability's stable deployment: the split, already checked against the other
    deployments (`gateway.deployments.weights.check_weights`)."""

    deployment_id: str
    weights: dict[str, int]
    sticky: bool = False
    reason: str = ""


class TakeBackShare(msgspec.Struct, frozen=True):
    """On the stable deployment: an experiment's weight back to 0, its share to the stable one
    (an operator's pause or abort, or a guard that tripped: `guard` says what it measured)."""

    deployment_id: str
    experiment_id: str
    reason: str
    guard: r.GuardTrip | None = None


class SetRollbackPolicy(msgspec.Struct, frozen=True):
    deployment_id: str  # an experiment
    policy: r.RollbackPolicy


class ChangeCaps(msgspec.Struct, frozen=True):
    deployment_id: str
    max_concurrency: int | None = None  # None: as it is
    max_queue_depth: int | None = None


DeploymentCommand = (
    DrainDeployment
    | CompleteDrain
    | ChangeResidency
    | ChangeScaling
    | ChangeCaps
    | SetExperimentActive
    | ChangeRoutingWeights
    | TakeBackShare
    | SetRollbackPolicy
)
