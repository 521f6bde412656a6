"""Decisions on a deployment: drain (refused while requests run), residency, an experiment's
activation, a capability's routing weights (on its stable deployment) and an experiment's rollback
policy. Pure."""

from __future__ import annotations

from datetime import datetime

from gateway.deployments.commands import (
    ChangeCaps,
    ChangeResidency,
    ChangeRoutingWeights,
    ChangeScaling,
    CompleteDrain,
    DeploymentCommand,
    DrainDeployment,
    SetExperimentActive,
    SetRollbackPolicy,
    TakeBackShare,
)
from gateway.deployments.model import DeploymentState
from streams.codes import ServingError
from streams.events import Event
from streams.events import serving as s


def decide_deployment(
    state: DeploymentState | None, command: DeploymentCommand, now: datetime
) -> list[Event]:
    if state is None:
        raise ServingError("CAPABILITY_NOT_FOUND", "unknown deployment", "deployment_id", http_status=404)
    match command:
        case DrainDeployment():
            if command.active_requests > 0:
                raise ServingError(
                    "DEPLOYMENT_BUSY",
                    f"{command.active_requests} requests are running on this deployment",
                    details={"active_requests": command.active_requests},
                )
            if state.draining:
                return []
            return [s.DeploymentDraining(deployment_id=state.deployment_id, reason=command.reason)]
        case CompleteDrain():
            return [] if state.drained else [s.DeploymentDrained(deployment_id=state.deployment_id)]
        case ChangeResidency():
            if state.residency == command.residency:
                return []
            return [s.ResidencyPolicyChanged(deployment_id=state.deployment_id, residency=command.residency)]
        case ChangeScaling():
            if (state.replicas, state.placement) == (command.replicas, command.placement):
                return []
            return [
                s.DeploymentScalingChanged(
                    deployment_id=state.deployment_id, replicas=command.replicas, placement=command.placement
                )
            ]
        case ChangeCaps():
            caps = checked_caps(state.caps, command.max_concurrency, command.max_queue_depth)
            if caps == state.caps:
                return []
            return [s.DeploymentCapsChanged(deployment_id=state.deployment_id, caps=caps)]
        case SetExperimentActive():
            if state.channel != "experiment":
                raise ServingError("EXPERIMENT_NOT_FOUND", "not an experiment", "deployment_id")
            if state.active == command.active:
                return []
            if command.active:
                if state.draining:
                    raise ServingError("EXPERIMENT_NOT_ROUTABLE", "a drained experiment cannot be activated")
                return [s.ExperimentActivated(deployment_id=state.deployment_id)]
            return [s.ExperimentDeactivated(deployment_id=state.deployment_id, reason=command.reason)]
        case ChangeRoutingWeights() | TakeBackShare():
            return _decide_split(state, command)
        case SetRollbackPolicy():
            if state.channel != "experiment":
                raise ServingError(
                    "ROLLBACK_POLICY_INVALID", "a rollback policy guards an experiment", "deployment_id"
                )
            if state.rollback == command.policy:
                return []
            return [s.RollbackPolicyChanged(deployment_id=state.deployment_id, policy=command.policy)]
    raise AssertionError(command)  # pragma: no cover


def _decide_split(state: DeploymentState, command: ChangeRoutingWeights | TakeBackShare) -> list[Event]:
    """A split lives on the stable deployment that takes traffic; taking back a share that is
    already 0 decides nothing (of two replicas whose guards trip together, one records it)."""
    if state.channel != "stable" or state.draining:
        raise ServingError(
            "ROUTING_TARGET_INVALID",
            f"{state.deployment_id} is not a stable deployment taking traffic",
            "deployment_id",
        )
    if isinstance(command, ChangeRoutingWeights):
        if (state.weights, state.sticky) == (command.weights, command.sticky):
            return []
        weights, reason, guard = command.weights, command.reason, None
        sticky = command.sticky
    else:
        share = state.weights.get(command.experiment_id, 0)
        if share == 0:
            return []
        stable_share = state.weights.get(state.deployment_id, 0) + share
        weights = {**state.weights, command.experiment_id: 0, state.deployment_id: stable_share}
        reason, guard, sticky = command.reason, command.guard, state.sticky
    return [
        s.RoutingWeightsChanged(
            deployment_id=state.deployment_id,
            capability=state.capability,
            weights=weights,
            sticky=sticky,
            reason=reason,
            guard=guard,
        )
    ]


MAX_CAP = 10_000  # as a client's max_concurrency


def checked_caps(
    caps: s.DeploymentCaps, concurrency: int | None, queue_depth: int | None
) -> s.DeploymentCaps:
    """`caps` with the values given, each a whole number from 0 (no cap of its own; no request
    waits) to MAX_CAP, or INVALID_INPUT naming the field."""
    for field, value in (("max_concurrency", concurrency), ("max_queue_depth", queue_depth)):
        if value is not None and (isinstance(value, bool) or not 0 <= value <= MAX_CAP):
            raise ServingError("INVALID_INPUT", f"{field} must be a whole number from 0 to {MAX_CAP}", field)
    return s.DeploymentCaps(
        max_concurrency=caps.max_concurrency if concurrency is None else concurrency,
        max_queue_depth=caps.max_queue_depth if queue_depth is None else queue_depth,
    )
