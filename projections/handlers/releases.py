"""Canary release events -> rows: the split on the stable deployment's row, each change of it in
`routing_changes` (with the guard that made it, if one did), an experiment's rollback policy."""

from __future__ import annotations

from projections.handlers.ops import Op, up
from streams.events import releases as r
from streams.events.base import Event


def ops(event: Event, seq: int, at: str | None) -> list[Op] | None:
    match event:
        case r.RoutingWeightsChanged():
            return [
                up(
                    "deployments",
                    (event.deployment_id,),
                    routing_weights=event.weights,
                    routing_sticky=event.sticky,
                    updated_at=at,
                ),
                up(
                    "routing_changes",
                    (seq,),
                    capability=event.capability,
                    stable_deployment_id=event.deployment_id,
                    weights=event.weights,
                    sticky=event.sticky,
                    reason=event.reason,
                    guard=event.guard,
                    changed_at=at,
                ),
            ]
        case r.RollbackPolicyChanged():
            return [up("deployments", (event.deployment_id,), rollback_policy=event.policy, updated_at=at)]
    return None
