"""A request that fails after its lease was granted gives the lease back and records its failure."""

from __future__ import annotations

from collections.abc import Callable

import httpx

from streams import subjects
from streams.events import serving as s
from streams.events.requests import RequestFailed
from tests.integration.gateway.conftest import Stack
from tests.support.serving import events_until


async def _first(stack: Stack, stream: str, wanted: Callable[[object], bool]) -> object:
    return (await events_until(stack.connection, stream, wanted))[-1]


async def test_a_request_whose_agent_died_is_503_gives_its_lease_back_and_is_recorded_failed(
    stack: Stack,
) -> None:
    headers = {"authorization": f"Bearer {stack.key.key}"}
    async with httpx.AsyncClient(timeout=60) as http:
        warm = await http.post(f"{stack.gateway.url}/v1/embeddings", json={"input": "warm"}, headers=headers)
        assert warm.status_code == 200  # MiniLM is resident on the agent's accelerator
        stack.agent.kill()
        response = await http.post(f"{stack.gateway.url}/v1/embeddings", json={"input": "x"}, headers=headers)
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "CAPABILITY_UNAVAILABLE"
    request_id = response.headers["x-request-id"]

    failed = await _first(
        stack,
        subjects.REQUESTS_STREAM,
        lambda e: isinstance(e, RequestFailed) and e.request_id == request_id,
    )
    assert failed.code == "CAPABILITY_UNAVAILABLE"  # type: ignore[attr-defined]
    lease = await _first(
        stack,
        subjects.EVENTS_STREAM,
        lambda e: isinstance(e, s.LeaseGranted) and e.request_id == request_id,
    )
    released = await _first(
        stack,
        subjects.EVENTS_STREAM,
        lambda e: isinstance(e, s.LeaseReleased) and e.lease_id == lease.lease_id,  # type: ignore[attr-defined]
    )
    assert released.outcome == "failed"  # type: ignore[attr-defined]
