"""Admin endpoints for operations: drain, unload, residency and scheduler policy, nodes and their
drain, the scheduler's views (overview, dry-run, co-residency, placements, metrics) and request history."""

from __future__ import annotations

import time
from typing import Annotated, Any

import msgspec

from eventstore import reading
from eventstore.store import ExpectedVersion
from gateway.admin import views
from gateway.admin.endpoint import ROWS, Call, Endpoint, Page
from gateway.admin.pipeline import Reason, promotion
from gateway.admin.reads import (
    METRICS_SQL,
    PLACEMENTS_SQL,
    REQUESTS_SQL,
    fresh_for,
    requests_from_log,
    written_here,
)
from gateway.admin.scheduler import co_residency, dry_run, overview
from gateway.deployments.commands import ChangeCaps
from gateway.operations import node_drain
from gateway.operations.service import Operations
from gateway.promotion import commands as cmd
from gateway.promotion.profile import check_scaling
from gateway.scheduler import Attribution, SchedulerPolicy, account
from gateway.serving.refusal_log import note_dry_run
from streams import subjects, text
from streams.codes import ServingError
from streams.envelope import new_id
from streams.events import serving as s

MAX_DRAIN_WAIT_S = 3600.0


class Residency(msgspec.Struct, frozen=True, kw_only=True):
    kind: s.ResidencyPolicyKind
    keep_warm_ttl_s: float = 0.0


class Scaling(msgspec.Struct, frozen=True, kw_only=True):
    min: int = 1
    max: int | None = None  # None: as many as `min`
    placement: str = "binpack"


class Caps(msgspec.Struct, frozen=True, kw_only=True):
    max_concurrency: int | None = None  # None: as it is
    max_queue_depth: int | None = None


class PolicyRevision(msgspec.Struct, frozen=True, kw_only=True):
    settings: dict[str, float | bool]


class NodeChange(msgspec.Struct, frozen=True, kw_only=True):
    enabled: bool | None = None
    production_eligible: bool | None = None
    decommission: bool = False
    reason: Annotated[str, text.REASON] = ""


class DrainRequest(msgspec.Struct, frozen=True, kw_only=True):
    reason: Annotated[str, text.REASON] = ""
    wait_s: Annotated[float, msgspec.Meta(ge=0, le=MAX_DRAIN_WAIT_S)] = 0.0  # for leases to end, in all


class DryRun(msgspec.Struct, frozen=True, kw_only=True):
    deployment_id: str
    channel: str = "production"  # or "lab"


class ProvePair(msgspec.Struct, frozen=True, kw_only=True):
    accelerator_id: str
    deployment_a: str
    deployment_b: str


class RequestPage(Page, frozen=True):
    client_id: Annotated[str, msgspec.Meta(description="Only this client's requests (all when empty)")] = ""


def ops(call: Call) -> Operations:
    return Operations(promotion(call))


async def drain(call: Call) -> object:
    body: Reason = call.body
    deployment, reclaimed = await ops(call).drain(call.path["deployment_id"], body.reason)
    return views.deployment(deployment, reclaimed_bytes=reclaimed)


async def unload(call: Call) -> object:
    resident, reclaimed = await ops(call).unload(call.path["deployment_id"])
    return {
        "deployment_id": call.path["deployment_id"],
        "was_resident": resident,
        "reclaimed_bytes": reclaimed,
    }


async def residency(call: Call) -> object:
    b: Residency = call.body
    if b.kind == "keep_warm" and b.keep_warm_ttl_s <= 0:
        raise ServingError("INVALID_INPUT", "keep_warm needs a positive keep_warm_ttl_s", "keep_warm_ttl_s")
    policy = s.ResidencyPolicy(kind=b.kind, keep_warm_ttl_s=b.keep_warm_ttl_s)
    return views.deployment(await ops(call).change_residency(call.path["deployment_id"], policy))


async def replicas(call: Call) -> object:
    b: Scaling = call.body
    wanted, placement = check_scaling(b.min, b.min if b.max is None else b.max, b.placement)
    return views.deployment(await ops(call).change_scaling(call.path["deployment_id"], wanted, placement))


async def caps(call: Call) -> object:
    b: Caps = call.body
    command = ChangeCaps(call.path["deployment_id"], b.max_concurrency, b.max_queue_depth)
    return views.deployment(await ops(call).change_caps(command))


async def set_experiment(call: Call, active: bool) -> object:
    return views.deployment(await ops(call).set_experiment_active(call.path["deployment_id"], active))


async def activate(call: Call) -> object:
    return await set_experiment(call, True)


async def deactivate(call: Call) -> object:
    return await set_experiment(call, False)


async def revise_policy(call: Call) -> object:
    body: PolicyRevision = call.body
    revised = await ops(call).revise_policy(body.settings)
    return {"revised": revised is not None, "policy": msgspec.to_builtins(call.edge.ctx.live.policy)}


async def show_policy(call: Call) -> object:
    return msgspec.to_builtins(call.edge.ctx.live.policy)


async def change_node(call: Call) -> object:
    b: NodeChange = call.body
    node_id, operations = call.path["node_id"], ops(call)
    if b.enabled is not None:
        await operations.node(cmd.SetNodeEnabled(node_id, b.enabled, b.reason))
    if b.production_eligible is not None:
        await operations.node(cmd.SetNodeEligibility(node_id, b.production_eligible, b.reason))
    if b.decommission:
        await operations.node(cmd.DecommissionNode(node_id, b.reason))
    return await show_node(call)


async def show_node(call: Call) -> object:
    node = await promotion(call).node(call.path["node_id"])
    out: dict[str, Any] = msgspec.to_builtins(node)
    out["online"] = call.edge.ctx.live.node_live(node.node_id)
    return out


async def list_nodes(call: Call) -> object:
    live = call.edge.ctx.live
    return [
        {**msgspec.to_builtins(n), "online": live.node_live(n.node_id)} for n in live.catalog.nodes.values()
    ]


async def drain_node(call: Call) -> object:
    b: DrainRequest = call.body
    return await node_drain.drain_node(ops(call), call.path["node_id"], b.reason, b.wait_s)


async def scheduler_overview(call: Call) -> object:
    return overview(call.edge.ctx.live)


async def placement_dry_run(call: Call) -> object:
    b: DryRun = call.body
    deployment = call.edge.ctx.live.catalog.deployments.get(b.deployment_id)
    if deployment is None:
        raise ServingError("CAPABILITY_NOT_FOUND", f"no deployment {b.deployment_id!r}", http_status=404)
    if b.channel not in ("production", "lab"):
        raise ServingError("INVALID_INPUT", "channel is production or lab", "channel")
    decision = dry_run(call.edge.ctx.live, deployment, b.channel)
    note_dry_run(call.edge.ctx, decision, b.deployment_id, new_id())  # on the record, whatever it says
    return msgspec.to_builtins(decision)


async def _proofs(call: Call) -> dict[tuple[str, str], dict[str, Any]]:
    records = await reading.read_subject_range(
        call.edge.ctx.client,
        subjects.EVENTS_STREAM,
        f"{subjects.EVENTS_PREFIX}.accelerator.*.CoResidencyProven",
    )
    out = {}
    for rec in records:  # in stream order: a pair's latest proof, SAFE or UNSAFE, is what holds
        if isinstance(rec.event, s.CoResidencyProven):
            pair = tuple(sorted((rec.event.deployment_a, rec.event.deployment_b)))
            out[(pair[0], pair[1])] = msgspec.to_builtins(rec.event)
    return out


async def co_residency_matrix(call: Call) -> object:
    return co_residency(call.edge.ctx.live, await _proofs(call))


async def prove_co_residency(call: Call) -> object:
    """Record what two residents of one worker generation measure together, from live telemetry."""
    b: ProvePair = call.body
    live, now = call.edge.ctx.live, time.time()
    state = live.accelerators.get(b.accelerator_id)
    if state is None:
        raise ServingError("RESIDENCY_CONFLICT", f"no accelerator {b.accelerator_id!r}")
    held = {r.deployment_id: r for r in state.residents if r.measured_bytes > 0 and r.state == "loaded"}
    if b.deployment_a == b.deployment_b or b.deployment_a not in held or b.deployment_b not in held:
        raise ServingError(
            "RESIDENCY_CONFLICT", "both deployments must be resident together on this accelerator"
        )
    budget = account(state, live.policy, now)
    if budget.attribution is not Attribution.KNOWN or budget.observed_used_bytes is None:
        raise ServingError("SCHEDULER_STATE_STALE", "no fresh telemetry for this accelerator")
    node = live.catalog.nodes.get(state.node_id)
    a, b2 = sorted((b.deployment_a, b.deployment_b))
    safe = budget.observed_used_bytes <= budget.total_bytes - budget.safety_reserve_bytes
    event = s.CoResidencyProven(
        accelerator_id=b.accelerator_id,
        deployment_a=a,
        deployment_b=b2,
        generation=node.generation if node else 0,
        observed_bytes=held[a].measured_bytes + held[b2].measured_bytes,
        state="PROVEN_SAFE" if safe else "PROVEN_UNSAFE",
    )
    store = call.edge.ctx.store
    await store.append(
        subjects.Aggregate.ACCELERATOR, b.accelerator_id, [event], ExpectedVersion.ANY, actor=call.actor
    )
    return msgspec.to_builtins(event)


async def placements(call: Call) -> object:
    limit = call.query.limit
    model = call.edge.read_models.required("placement history")
    await fresh_for(model, call)
    return await model.query(PLACEMENTS_SQL, (limit,))


async def scheduler_metrics(call: Call) -> object:
    live = call.edge.ctx.live
    budgets = [account(a, live.policy, time.time()) for a in live.schedulable_accelerators()]
    gauges = {
        "resident_bytes": sum(b.resident_bytes for b in budgets),
        "leased_bytes": sum(b.leased_bytes for b in budgets),
        "external_bytes": sum(b.external_bytes for b in budgets),
        "schedulable_bytes": sum(b.schedulable_bytes for b in budgets),
    }
    model = call.edge.read_models.get()
    counters: dict[str, Any] = {}
    if model is not None:
        await fresh_for(model, call)
        counters = (await model.query(METRICS_SQL))[0]
    return {"gauges": gauges, "counters": counters, "queued_requests": call.edge.ctx.queued}


async def request_history(call: Call) -> object:
    query: RequestPage = call.query
    limit, client_id = query.limit, query.client_id or None
    model = call.edge.read_models.get()
    if model is None:
        await written_here(call)
        return await requests_from_log(call.edge.ctx.client, limit, client_id)
    await fresh_for(model, call)
    return await model.query(REQUESTS_SQL, (client_id, client_id, limit))


ENDPOINTS = [
    Endpoint("POST", "/deployments/{deployment_id}/drain", "Drain (stop routing, unload)", drain, Reason, "operations"),
    Endpoint("POST", "/deployments/{deployment_id}/unload", "Unload a resident deployment", unload, tag="operations"),
    Endpoint(
        "POST", "/deployments/{deployment_id}/residency", "Change the residency policy", residency, Residency,
        "operations",
    ),
    Endpoint(
        "POST", "/deployments/{deployment_id}/replicas", "Change the replicas and placement", replicas, Scaling,
        "operations",
    ),
    Endpoint(
        "POST", "/deployments/{deployment_id}/caps", "Change the concurrency and queue caps", caps, Caps,
        "operations",
    ),
    Endpoint("POST", "/experiments/{deployment_id}/activate", "Activate an experiment route", activate, tag="operations"),
    Endpoint(
        "POST", "/experiments/{deployment_id}/deactivate", "Deactivate an experiment route", deactivate,
        tag="operations",
    ),
    Endpoint("GET", "/nodes", "Nodes and their liveness", list_nodes, tag="operations", response=ROWS),
    Endpoint("GET", "/nodes/{node_id}", "One node", show_node, tag="operations"),
    Endpoint("POST", "/nodes/{node_id}", "Enable, disable, set eligibility, decommission", change_node, NodeChange, "operations"),
    Endpoint(
        "POST", "/nodes/{node_id}/drain", "Cordon a node and unload its resident copies", drain_node,
        DrainRequest, "operations", response=node_drain.NodeDrain,
    ),
    Endpoint("GET", "/scheduler/policy", "The scheduler policy in force", show_policy, tag="scheduler", response=SchedulerPolicy),
    Endpoint("POST", "/scheduler/policy", "Revise the scheduler policy", revise_policy, PolicyRevision, "scheduler"),
    Endpoint("GET", "/scheduler/overview", "Budgets per accelerator", scheduler_overview, tag="scheduler"),
    Endpoint("POST", "/scheduler/dry-run", "Plan a placement without acting", placement_dry_run, DryRun, "scheduler"),
    Endpoint("GET", "/scheduler/co-residency", "The co-residency matrix", co_residency_matrix, tag="scheduler", response=ROWS),
    Endpoint(
        "POST", "/scheduler/co-residency/prove", "Record two residents measured together", prove_co_residency,
        ProvePair, "scheduler", response=s.CoResidencyProven,
    ),
    Endpoint(
        "GET", "/scheduler/placements", "Placement history (read model)", placements, tag="scheduler", response=ROWS,
        query=Page,
    ),
    Endpoint("GET", "/scheduler/metrics", "Scheduler counters and gauges", scheduler_metrics, tag="scheduler"),
    Endpoint(
        "GET", "/requests", "Request history with latency breakdown", request_history, tag="operations",
        response=ROWS, query=RequestPage,
    ),
]  # fmt: skip
