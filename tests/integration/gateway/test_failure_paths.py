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


async def test_a_request_whose_agent_died_fails_gives_its_lease_back_and_is_recorded_failed(
    stack: Stack,
) -> None:
    headers = {"authorization": f"Bearer {stack.key.key}"}
    async with httpx.AsyncClient(timeout=60) as http:
        warm = await http.post(f"{stack.gateway.url}/v1/embeddings", json={"input": "warm"}, headers=headers)
        assert warm.status_code == 200  # MiniLM is resident on the agent's accelerator
        stack.agent.kill()
        # nats-server drops the dead agent's interest as soon as it sees the socket close; should the
        # call beat that, it goes unanswered and times out instead. Either way it fails after its lease.
        response = await http.post(
            f"{stack.gateway.url}/v1/embeddings",
            json={"input": "x"},
            headers={**headers, "x-request-timeout-ms": "3000"},
        )
    code = response.json()["error"]["code"]
    assert (response.status_code, code) in {(503, "CAPABILITY_UNAVAILABLE"), (504, "REQUEST_TIMEOUT")}
    request_id = response.headers["x-request-id"]

    failed = await _first(
        stack,
        subjects.REQUESTS_STREAM,
        lambda e: isinstance(e, RequestFailed) and e.request_id == request_id,
    )
    assert failed.code == code  # type: ignore[attr-defined]
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
