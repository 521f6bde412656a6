"""Rules across deployments, approvals and nodes, held against concurrent operators: one stable
deployment per capability. Tests in order share the module's stack."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.promotion.conftest import Stack, lab_ready_candidate

pytestmark = pytest.mark.timeout(600)


async def stables(stack: Stack) -> list[dict[str, Any]]:
    deployments = await stack.get("/deployments")
    assert isinstance(deployments, list)
    return [d for d in deployments if d["channel"] == "stable" and not d["drained"]]


async def approved(stack: Stack, candidate: dict[str, Any]) -> dict[str, Any]:
    approval = await stack.post("/approvals/production", {"candidate_id": candidate["candidate_id"]})
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
