"""Rules across deployments, approvals and nodes, held against concurrent operators: one stable
deployment per capability, experiment routes apart from stable model names, a revocation that is
final, a decommissioning that outlives the node's restart. Tests in order share the module's stack."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from eventstore.store import EventStore, ExpectedVersion
from streams.events import control as c
from streams.subjects import Aggregate
from tests.integration.promotion.conftest import Stack, lab_ready_candidate, production_approval
from tests.integration.promotion.test_gate_refusals import refused

pytestmark = pytest.mark.timeout(600)


async def stables(stack: Stack) -> list[dict[str, Any]]:
    deployments = await stack.get("/deployments")
    assert isinstance(deployments, list)
    return [d for d in deployments if d["channel"] == "stable" and not d["drained"]]


async def approved(stack: Stack, candidate: dict[str, Any]) -> dict[str, Any]:
    approval = await stack.post("/approvals/production", production_approval(candidate["candidate_id"]))
    assert isinstance(approval, dict)
    return {"candidate_id": candidate["candidate_id"], "approval_id": approval["approval_id"]}


async def test_of_two_concurrent_promotions_one_gets_the_stable_channel(
    stack: Stack, minilm_source: Path
) -> None:
    first = await approved(stack, await lab_ready_candidate(stack, minilm_source, "race-a"))
    second = await approved(stack, await lab_ready_candidate(stack, minilm_source, "race-b"))
    answers: list[httpx.Response] = await asyncio.gather(
        stack.admin.post("/admin/v1/deployments", json=first),
        stack.admin.post("/admin/v1/deployments", json=second),
    )
    assert sorted(r.status_code for r in answers) == [200, 409], [r.text for r in answers]
    (loser,) = [r.json() for r in answers if r.status_code == 409]
    assert loser["error"]["code"] == "STABLE_DEPLOYMENT_EXISTS"
    (stable,) = await stables(stack)
    assert stable["model_name"] in ("race-a", "race-b")


async def test_an_experiment_route_is_a_plain_name_no_stable_model_answers_to(
    stack: Stack, minilm_source: Path
) -> None:
    (stable,) = await stables(stack)
    lab = await lab_ready_candidate(stack, minilm_source, "lab-c")
    body = {"candidate_id": lab["candidate_id"], "lab_approval_id": lab["lab_approval_id"]}
    await refused(stack, "/experiments", {**body, "route": stable["model_name"]}, "EXPERIMENT_NOT_ROUTABLE")
    await refused(stack, "/experiments", {**body, "route": "rag.embedding"}, "EXPERIMENT_NOT_ROUTABLE")
    for bad in ("", "a b", "rag.embedding@1"):
        await refused(stack, "/experiments", {**body, "route": bad}, "INVALID_INPUT", status=422)
    # The race's loser is not stable: its model name is free for a route.
    loser = "race-b" if stable["model_name"] == "race-a" else "race-a"
    experiment = await stack.post("/experiments", {**body, "route": loser})
    assert isinstance(experiment, dict)
    assert experiment["status"] == "active"


async def test_a_stable_deployment_is_not_promoted_under_an_experiment_route(stack: Stack) -> None:
    (stable,) = await stables(stack)
    await stack.post(f"/deployments/{stable['deployment_id']}/drain", {"reason": "make room"})
    loser = "race-b" if stable["model_name"] == "race-a" else "race-a"
    approvals = await stack.get("/approvals")
    assert isinstance(approvals, list)
    (approval,) = [a for a in approvals if a["candidate_id"] == f"cand-{loser}" and a["kind"] == "production"]
    body = {"candidate_id": f"cand-{loser}", "approval_id": approval["approval_id"]}
    error = await refused(stack, "/deployments", body, "STATE_CONFLICT")
    assert error["error"]["details"]["route"] == loser
    assert await stables(stack) == []


async def test_approving_revoked_facts_again_leaves_the_approval_revoked(stack: Stack) -> None:
    first = await stack.post("/approvals/production", production_approval("cand-lab-c"))
    assert isinstance(first, dict)
    await stack.post(f"/approvals/{first['approval_id']}/revoke", {"reason": "bad model"})
    error = await refused(
        stack, "/approvals/production", production_approval("cand-lab-c"), "PRODUCTION_APPROVAL_STALE"
    )
    assert error["error"]["details"]["approval_id"] == first["approval_id"]
    after = await stack.get(f"/approvals/{first['approval_id']}")
    assert isinstance(after, dict)
    assert after["status"] == "revoked"
    body = {"candidate_id": "cand-lab-c", "approval_id": first["approval_id"]}
    await refused(stack, "/deployments", body, "PRODUCTION_APPROVAL_STALE")


async def test_a_decommissioned_node_stays_out_of_service_when_it_registers_again(stack: Stack) -> None:
    # A second node, registered as its agent would; decommissioned, then restarted on new runtimes.
    store = EventStore(stack.connection)
    registered = c.NodeRegistered(
        node_id="node-retired", hostname="retired", hardware_fingerprint="hw-retired",
        accelerators=(c.AcceleratorSpec(accelerator_id="node-retired-cpu0", kind="cpu", name="cpu", total_bytes=1 << 30),),
        protocol_capabilities=(), runtimes=("onnxruntime-cpu",), agent_version="test",
    )  # fmt: skip
    await store.append(Aggregate.NODE, "node-retired", [registered], ExpectedVersion.NO_STREAM)
    await stack.post("/nodes/node-retired", {"decommission": True, "reason": "retired"})
    restarted = msgspec.structs.replace(registered, runtimes=("onnxruntime-cpu", "tensorrt"))
    version = await store.append(Aggregate.NODE, "node-retired", [restarted], ExpectedVersion.ANY)
    assert stack.gateway.replica is not None
    await stack.gateway.replica.edge.ctx.live.wait_applied(version, timeout=10.0)
    nodes = await stack.get("/nodes")
    assert isinstance(nodes, list)
    (listed,) = [n for n in nodes if n["node_id"] == "node-retired"]
    assert listed["decommissioned"] is True
    assert listed["runtimes"] == ["onnxruntime-cpu", "tensorrt"]
    await refused(stack, "/nodes/node-retired", {"enabled": True}, "STATE_CONFLICT")
