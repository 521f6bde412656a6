"""Critical memory pressure on the only device: a cold request whose deadline outlasts the
recovery waits in line and is served once pressure has stably fallen; one whose deadline cannot
see it fall is refused PRESSURE_CRITICAL, naming its deadline. Pressure is driven as an operator
can: the policy's thresholds, revised through the admin API, put the agent's own memory past
critical; putting them back lets it recover."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import httpx
import pytest

from gateway.scheduler import Pressure
from streams import subjects
from streams.events import serving as s
from tests.integration.gateway.conftest import Stack, another_deployment, first_event, policy_while

pytestmark = pytest.mark.timeout(300)
# Any memory at all is critical: the agent process alone holds more than 0.3 % of its budget.
CRITICAL_ALREADY = {"pressure_elevated_at": 0.001, "pressure_high_at": 0.002, "pressure_critical_at": 0.003}


@contextlib.asynccontextmanager
async def critical(stack: Stack) -> AsyncIterator[None]:
    """The stack's device at CRITICAL pressure, booked, while the block runs; thresholds back after."""
    assert stack.gateway.replica is not None
    live = stack.gateway.replica.edge.ctx.live
    accelerator = f"{stack.node}-cpu0"
    async with policy_while(stack, CRITICAL_ALREADY):
        assert await live.wait_for(
            lambda: live.accelerators[accelerator].pressure.level is Pressure.CRITICAL, 30
        )
        yield


async def _embed(http: httpx.AsyncClient, stack: Stack, model: str, timeout_ms: int) -> httpx.Response:
    return await http.post(
        f"{stack.gateway.url}/v1/embeddings",
        json={"input": "under pressure", "model": model},
        headers={"authorization": f"Bearer {stack.key.key}", "x-request-timeout-ms": str(timeout_ms)},
    )


def _cold_load_ms(stack: Stack, deployment: str) -> float:
    assert stack.gateway.replica is not None
    return stack.gateway.replica.edge.ctx.live.catalog.deployments[deployment].envelope.cold_load_ms


async def _queued_for_pressure(stack: Stack, deployment: str) -> s.PlacementRejected:
    queued = await first_event(
        stack,
        subjects.EVENTS_STREAM,
        lambda e: (
            isinstance(e, s.PlacementRejected) and e.deployment_id == deployment and e.verdict == "QUEUE"
        ),
    )
    assert isinstance(queued, s.PlacementRejected)
    return queued


async def test_a_cold_request_waits_out_critical_pressure_and_is_served_once_it_has_fallen(
    stack: Stack,
) -> None:
    deployment = await another_deployment(stack, "minilm-pressed", "pressed")
    async with httpx.AsyncClient(timeout=60) as http, policy_while(stack, {"pressure_stable_seconds": 2.0}):
        async with critical(stack):
            request = asyncio.create_task(_embed(http, stack, "pressed", 30_000))
            queued = await _queued_for_pressure(stack, deployment)
        # thresholds back: utilisation falls below critical, and 2 s later cold loads may resume
        response = await request
    assert queued.reason_codes == ("PRESSURE_CRITICAL",)
    assert response.status_code == 200, response.text
    assert response.headers["x-mf-deployment"] == deployment


async def test_a_request_whose_deadline_is_shorter_than_the_stable_period_is_refused_naming_it(
    stack: Stack,
) -> None:
    deployment = await another_deployment(stack, "minilm-hurried", "hurried")
    # Long enough for the load (as its probe measured it on this busy machine), not for 5 s more.
    deadline_ms = int(_cold_load_ms(stack, deployment) + 3_000)
    stable = policy_while(stack, {"pressure_stable_seconds": deadline_ms / 1000 + 2.0})
    async with httpx.AsyncClient(timeout=60) as http, stable, critical(stack):
        response = await _embed(http, stack, "hurried", deadline_ms)
    assert response.status_code == 503, response.text
    error = response.json()["error"]
    assert error["code"] == "PRESSURE_CRITICAL"
    assert "CRITICAL" in error["message"]
    assert "deadline leaves" in error["message"]
    assert 0 < error["details"]["deadline_ms"] <= deadline_ms
    assert error["details"]["reason_codes"][:2] == ["PRESSURE_CRITICAL", "DEADLINE_EXCEEDED"]
    refused = await first_event(
        stack,
        subjects.EVENTS_STREAM,
        lambda e: isinstance(e, s.PlacementRejected) and e.deployment_id == deployment,
    )
    assert refused.reason_codes[:2] == ("PRESSURE_CRITICAL", "DEADLINE_EXCEEDED")  # type: ignore[attr-defined]


async def test_a_waiting_request_is_refused_pressure_critical_once_its_deadline_cannot_see_it_fall(
    stack: Stack,
) -> None:
    deployment = await another_deployment(stack, "minilm-outlasted", "outlasted")
    deadline_ms = int(
        2_000 + _cold_load_ms(stack, deployment) + 3_000
    )  # room to wait 3 s, but pressure does not fall
    stable = policy_while(stack, {"pressure_stable_seconds": 2.0})
    async with httpx.AsyncClient(timeout=60) as http, stable, critical(stack):
        response = await _embed(http, stack, "outlasted", deadline_ms)
    await _queued_for_pressure(stack, deployment)
    assert response.status_code == 503, response.text  # not a 504 at the deadline itself
    error = response.json()["error"]
    assert error["code"] == "PRESSURE_CRITICAL"
    assert "deadline leaves" in error["message"]
