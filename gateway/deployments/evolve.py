"""The deployment's fold: `evolve_deployment(state, event, seq) -> state`. Pure; events of other
aggregates, and unknown ones, leave a state as it is."""

from __future__ import annotations

import msgspec

from gateway.deployments.model import DeploymentState
from streams.events import Event
from streams.events import serving as s

_replace = msgspec.structs.replace


def evolve_deployment(state: DeploymentState | None, event: Event, seq: int) -> DeploymentState | None:
    match event:
        case s.DeploymentPromoted():
            return DeploymentState(
                deployment_id=event.deployment_id,
                capability=event.capability,
                candidate_id=event.candidate_id,
                artifact_set_id=event.artifact_set_id,
                model_name=event.model_name,
                channel="stable",
                envelope=event.envelope,
                residency=event.residency,
                embedding_space=event.embedding_space,
                approval_id=event.approval_id,
                max_batch_size=event.max_batch_size,
                probe_id=event.probe_id,
                manifest_sha256=event.manifest_sha256,
            )
        case s.ExperimentCreated():
            return DeploymentState(
                deployment_id=event.deployment_id,
                capability=event.capability,
                candidate_id=event.candidate_id,
                artifact_set_id=event.artifact_set_id,
                model_name=event.model_name,
                channel="experiment",
                envelope=event.envelope,
                residency=s.ResidencyPolicy(),
                embedding_space=event.embedding_space,
                route=event.route,
                active=False,
                caps=s.EXPERIMENT_CAPS,
                probe_id=event.probe_id,
                manifest_sha256=event.manifest_sha256,
            )
        case s.ExperimentActivated() if state is not None:
            return _replace(state, active=True)
        case s.ExperimentDeactivated() if state is not None:
            return _replace(state, active=False)
        case s.DeploymentDraining() if state is not None:
            return _replace(state, draining=True)
        case s.DeploymentDrained() if state is not None:
            return _replace(state, draining=True, drained=True, active=False)
        case s.ResidencyPolicyChanged() if state is not None:
            return _replace(state, residency=event.residency)
        case s.DeploymentScalingChanged() if state is not None:
            return _replace(state, replicas=event.replicas, placement=event.placement)
        case s.RoutingWeightsChanged() if state is not None:
            return _replace(state, weights=dict(event.weights), sticky=event.sticky)
        case s.RollbackPolicyChanged() if state is not None:
            return _replace(state, rollback=event.policy)
        case s.DeploymentCapsChanged() if state is not None:
            return _replace(state, caps=event.caps)
    return state
