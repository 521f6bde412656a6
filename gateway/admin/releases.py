"""Admin endpoints for canary releases: a capability's routing weights (the splits in force, from
the live view; their history, from the read model), an experiment's share and rollback policy, and
promote / pause / abort (gateway.operations.canary)."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from gateway.admin.endpoint import ROWS, Call, Endpoint, Page
from gateway.admin.pipeline import Reason, promotion
from gateway.admin.reads import fresh_for
from gateway.deployments.model import DeploymentState
from gateway.operations.canary import Canary
from streams import text
from streams.events import releases as r


class Split(msgspec.Struct, frozen=True, kw_only=True):
    capability: str
    weights: dict[str, Any]  # deployment id -> percent (checked: ROUTING_WEIGHTS_INVALID)
    sticky: bool = False
    reason: Annotated[str, text.REASON] = ""


class Share(msgspec.Struct, frozen=True, kw_only=True):
    weight: int  # percent the experiment takes; the stable deployment the rest
    sticky: bool = False
    reason: Annotated[str, text.REASON] = ""


class RoutingPage(Page, frozen=True):
    capability: Annotated[
        str, msgspec.Meta(description="Only this capability's changes (all when empty)")
    ] = ""


ROUTING_CHANGES_SQL = """
SELECT seq, capability, stable_deployment_id, weights, sticky, reason, guard, changed_at
FROM routing_changes WHERE (%s::text IS NULL OR capability = %s) ORDER BY seq DESC LIMIT %s
"""


def canary(call: Call) -> Canary:
    return Canary(promotion(call))


def split_view(stable: DeploymentState) -> dict[str, Any]:
    return {
        "capability": stable.capability,
        "stable_deployment_id": stable.deployment_id,
        "weights": stable.weights or {stable.deployment_id: 100},
        "sticky": stable.sticky,
    }


async def set_routing_weights(call: Call) -> object:
    b: Split = call.body
    return split_view(await canary(call).set_weights(b.capability, b.weights, b.sticky, b.reason))


async def set_experiment_share(call: Call) -> object:
    b: Share = call.body
    return split_view(await canary(call).set_share(call.path["deployment_id"], b.weight, b.sticky, b.reason))


async def set_rollback_policy(call: Call) -> object:
    experiment = await canary(call).set_policy(call.path["deployment_id"], call.body)
    return {
        "deployment_id": experiment.deployment_id,
        "rollback_policy": msgspec.to_builtins(experiment.rollback),
    }


async def promote_experiment(call: Call) -> object:
    body: Reason = call.body
    return split_view(await canary(call).promote(call.path["deployment_id"], body.reason))


async def pause_experiment(call: Call) -> object:
    body: Reason = call.body
    return split_view(await canary(call).pause(call.path["deployment_id"], body.reason))


async def abort_experiment(call: Call) -> object:
    body: Reason = call.body
    return split_view(await canary(call).abort(call.path["deployment_id"], body.reason))


async def routing_splits(call: Call) -> object:
    """Every capability's split in force, as this gateway's live view holds it."""
    deployments = call.edge.ctx.live.catalog.deployments.values()
    return [split_view(d) for d in deployments if d.channel == "stable" and not d.drained]


async def routing_changes(call: Call) -> object:
    query: RoutingPage = call.query
    limit, capability = query.limit, query.capability or None
    model = call.edge.read_models.required("routing history")
    await fresh_for(model, call)
    return await model.query(ROUTING_CHANGES_SQL, (capability, capability, limit))


ENDPOINTS = [
    Endpoint("GET", "/routing", "Each capability's traffic split in force", routing_splits, tag="releases", response=ROWS),
    Endpoint("POST", "/routing", "Set a capability's routing weights", set_routing_weights, Split, "releases"),
    Endpoint(
        "GET", "/routing/changes", "Routing weight changes, newest first (read model)", routing_changes,
        tag="releases", response=ROWS, query=RoutingPage,
    ),
    Endpoint("POST", "/experiments/{deployment_id}/share", "Give an experiment a share of the traffic", set_experiment_share, Share, "releases"),
    Endpoint(
        "POST", "/experiments/{deployment_id}/rollback-policy", "Set an experiment's rollback guards", set_rollback_policy,
        r.RollbackPolicy, "releases",
    ),
    Endpoint("POST", "/experiments/{deployment_id}/promote", "All traffic to the experiment", promote_experiment, Reason, "releases"),
    Endpoint("POST", "/experiments/{deployment_id}/pause", "Experiment weight to 0, kept loaded", pause_experiment, Reason, "releases"),
    Endpoint("POST", "/experiments/{deployment_id}/abort", "Weight 0, deactivate and unload", abort_experiment, Reason, "releases"),
]  # fmt: skip
