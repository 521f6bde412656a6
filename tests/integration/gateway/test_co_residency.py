"""Proving two residents together from live telemetry, and the matrix showing the latest proof."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from tests.integration.gateway.conftest import Stack, another_deployment

TOKEN = "operator-token-for-co-residency-tests"


@pytest.fixture
async def admin(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    assert stack.gateway.replica is not None
    stack.gateway.replica.edge.operator_token = TOKEN
    headers = {"authorization": f"Bearer {TOKEN}", "x-mf-operator": "tests"}
    async with httpx.AsyncClient(
        base_url=f"{stack.gateway.url}/admin/v1", headers=headers, timeout=60
    ) as http:
        yield http


async def _matrix_status(admin: httpx.AsyncClient, a: str, b: str) -> str:
    rows = (await admin.get("/scheduler/co-residency")).json()
    (row,) = [r for r in rows if {r["deployment_a"], r["deployment_b"]} == {a, b}]
    return str(row["status"])


async def test_a_pair_that_fits_is_proven_safe_and_a_later_proof_that_does_not_shows_unsafe(
    stack: Stack, admin: httpx.AsyncClient
) -> None:
    other = await another_deployment(stack, "minilm-pair", "pair")
    headers = {"authorization": f"Bearer {stack.key.key}"}
    async with httpx.AsyncClient(timeout=60) as http:
        for model in ("all-MiniLM-L6-v2", "pair"):  # both resident together on the node
            response = await http.post(
                f"{stack.gateway.url}/v1/embeddings", json={"input": "x", "model": model}, headers=headers
            )
            assert response.status_code == 200, response.text
    accelerator = f"{stack.node}-cpu0"
    pair = {"accelerator_id": accelerator, "deployment_a": stack.deployment_id, "deployment_b": other}
    fits = await admin.post("/scheduler/co-residency/prove", json=pair)
    assert fits.status_code == 200, fits.text
    assert fits.json()["state"] == "PROVEN_SAFE"
    assert await _matrix_status(admin, stack.deployment_id, other) == "PROVEN_SAFE"

    overview = (await admin.get("/scheduler/overview")).json()["accelerators"]
    (budget,) = [a["budget"] for a in overview if a["accelerator_id"] == accelerator]
    # A reserve under which the books (what the two measured) still fit but what the device holds
    # together (the agent's whole RSS: the two and what they share) does not: halfway between.
    room = budget["resident_bytes"] + (budget["observed_used_bytes"] - budget["resident_bytes"]) // 2
    reserve = budget["total_bytes"] - room
    revised = await admin.post("/scheduler/policy", json={"settings": {"safety_reserve_min_bytes": reserve}})
    assert revised.status_code == 200, revised.text
    try:
        assert stack.gateway.replica is not None
        live = stack.gateway.replica.edge.ctx.live
        assert await live.wait_for(lambda: live.policy.safety_reserve_min_bytes == reserve, 10)
        refuted = await admin.post("/scheduler/co-residency/prove", json=pair)
        assert refuted.status_code == 200, refuted.text
        assert refuted.json()["state"] == "PROVEN_UNSAFE"
        assert await _matrix_status(admin, stack.deployment_id, other) == "PROVEN_UNSAFE"  # the latest
    finally:
        await admin.post("/scheduler/policy", json={"settings": {"safety_reserve_min_bytes": 1 << 30}})
