"""Proving two residents together from live telemetry, a pair that fits and a pair that does not,
and the matrix showing the latest proof."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import httpx
import pytest

from eventstore.store import ExpectedVersion
from gateway.scheduler import account
from streams.events import serving as s
from streams.subjects import Aggregate
from tests.integration.gateway.conftest import Stack, another_deployment, stack_admin
from tests.support.serving import set_policy

TOKEN = "operator-token-for-co-residency-tests"


@pytest.fixture
async def admin(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    async with stack_admin(stack, TOKEN) as http:
        yield http


async def _matrix_status(admin: httpx.AsyncClient, a: str, b: str) -> str:
    rows = (await admin.get("/scheduler/co-residency")).json()
    (row,) = [r for r in rows if {r["deployment_a"], r["deployment_b"]} == {a, b}]
    return str(row["status"])


async def test_a_pair_that_fits_is_proven_safe_and_the_matrix_shows_a_pairs_latest_proof(
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

    # A later proof of the same pair that did not fit (recorded as `prove` records one): the matrix
    # shows the latest. (Through `prove` itself this takes a reserve under which the books do not fit
    # either, and the upkeep then unloads the pair: see test_overcommit.)
    later = s.CoResidencyProven(
        accelerator_id=accelerator,
        deployment_a=min(stack.deployment_id, other),
        deployment_b=max(stack.deployment_id, other),
        generation=fits.json()["generation"],
        observed_bytes=fits.json()["observed_bytes"],
        state="PROVEN_UNSAFE",
    )
    await stack.store.append(Aggregate.ACCELERATOR, accelerator, [later], ExpectedVersion.ANY)
    assert await _matrix_status(admin, stack.deployment_id, other) == "PROVEN_UNSAFE"


async def _both_resident(stack: Stack, models: tuple[str, ...]) -> None:
    headers = {"authorization": f"Bearer {stack.key.key}"}
    async with httpx.AsyncClient(timeout=60) as http:
        for model in models:
            response = await http.post(
                f"{stack.gateway.url}/v1/embeddings", json={"input": "x", "model": model}, headers=headers
            )
            assert response.status_code == 200, response.text
    await stack.gateway.settled()


async def test_a_pair_that_does_not_fit_is_proven_unsafe_and_the_matrix_shows_it_until_a_later_proof(
    stack: Stack, admin: httpx.AsyncClient
) -> None:
    other = await another_deployment(stack, "minilm-crowded", "crowded")
    pair = (stack.deployment_id, other)
    # Pinned (always warm), so that the upkeep does not unload them when the books stop fitting.
    for deployment in pair:
        pinned = await admin.post(f"/deployments/{deployment}/residency", json={"kind": "always_warm"})
        assert pinned.status_code == 200, pinned.text
    try:
        await _both_resident(stack, ("all-MiniLM-L6-v2", "crowded"))
        accelerator = f"{stack.node}-cpu0"
        assert stack.gateway.replica is not None
        live = stack.gateway.replica.edge.ctx.live
        budget = account(live.accelerators[accelerator], live.policy, time.time())
        assert budget.observed_used_bytes is not None
        # A reserve that leaves room for half of what the device holds now: the pair does not fit.
        crowded = {"safety_reserve_min_bytes": budget.total_bytes - budget.observed_used_bytes // 2}
        body = {"accelerator_id": accelerator, "deployment_a": pair[0], "deployment_b": pair[1]}
        usual = {"safety_reserve_min_bytes": live.policy.safety_reserve_min_bytes}
        await set_policy([stack.gateway.url], TOKEN, crowded)
        try:
            unsafe = await admin.post("/scheduler/co-residency/prove", json=body)
        finally:
            await set_policy([stack.gateway.url], TOKEN, usual)
        assert unsafe.status_code == 200, unsafe.text
        assert unsafe.json()["state"] == "PROVEN_UNSAFE"
        assert await _matrix_status(admin, *pair) == "PROVEN_UNSAFE"

        safe = await admin.post("/scheduler/co-residency/prove", json=body)  # under the usual reserve
        assert safe.json()["state"] == "PROVEN_SAFE", safe.text
        assert await _matrix_status(admin, *pair) == "PROVEN_SAFE"
    finally:
        for deployment in pair:
            await admin.post(f"/deployments/{deployment}/residency", json={"kind": "on_demand"})
