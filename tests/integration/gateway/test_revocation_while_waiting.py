"""A revocation or a disable reaches the requests of that key waiting for capacity: once memory
frees up they are refused (401 / 403), not served with a key the operator has withdrawn."""

from __future__ import annotations

import asyncio

import httpx
import msgspec
import pytest

from eventstore.store import ExpectedVersion
from gateway.clients.service import ClientService
from streams import subjects
from streams.envelope import new_id
from streams.events import serving as s
from streams.messages import QueueDepth
from streams.subjects import Aggregate
from tests.integration.gateway.conftest import (
    PRESSURE_PAST_BUDGET,
    SHARES_THE_STACK,
    Stack,
    books_filled,
    failure_of,
    policy_while,
)
from tests.support.agents import aggregate_events

pytestmark = SHARES_THE_STACK


@pytest.mark.parametrize(("withdraw", "status"), [("revoke", 401), ("disable", 403)])
async def test_a_request_waiting_for_capacity_when_its_key_is_withdrawn_is_refused_not_served(
    stack: Stack, withdraw: str, status: int
) -> None:
    assert stack.gateway.replica is not None
    edge = stack.gateway.replica.edge
    service = ClientService(stack.store)
    issued = await service.create(f"withdrawn-{new_id()[:6]}", ["rag.embedding@1"], requests_per_minute=1000)
    await edge.directory.wait_until_applied(issued.sequence, timeout=5)
    accelerator = f"{stack.node}-cpu0"
    blockers, released = books_filled(stack, accelerator)  # the request waits in line for them to end
    depths = await stack.connection.client.subscribe(subjects.queue_depth_subject(edge.ctx.gateway_id))
    headers = {"authorization": f"Bearer {issued.key}", "x-request-timeout-ms": "20000"}
    async with policy_while(stack, PRESSURE_PAST_BUDGET), httpx.AsyncClient(timeout=60) as http:
        seq = await stack.store.append(Aggregate.ACCELERATOR, accelerator, blockers, ExpectedVersion.ANY)
        try:
            assert await edge.ctx.live.wait_applied(seq, timeout=10)
            waiting = asyncio.create_task(
                http.post(f"{stack.gateway.url}/v1/embeddings", json={"input": "x"}, headers=headers)
            )
            async with asyncio.timeout(20):  # it waits in line
                while (
                    msgspec.json.decode((await depths.next_msg(timeout=20)).data, type=QueueDepth).depth < 1
                ):
                    pass
            if withdraw == "revoke":
                withdrawn = await service.revoke(issued.client_id, issued.credential_id, "leaked")
            else:
                withdrawn = await service.disable(issued.client_id, "abuse")
            # A set-up step here: how fast a withdrawal applies is tested in tests/integration/clients.
            await edge.directory.wait_until_applied(withdrawn, timeout=10)
        finally:
            await depths.unsubscribe()
            await stack.store.append(Aggregate.ACCELERATOR, accelerator, released, ExpectedVersion.ANY)
        response = await waiting
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == "CAPABILITY_NOT_AUTHORIZED"
    failed = await failure_of(stack, error["request_id"])
    assert (failed.code, failed.http_status) == ("CAPABILITY_NOT_AUTHORIZED", status)
    await stack.gateway.settled()
    events = await aggregate_events(stack.connection, Aggregate.ACCELERATOR, accelerator)
    leases = [
        e.lease_id for e in events if isinstance(e, s.LeaseGranted) and e.request_id == error["request_id"]
    ]
    ended = {e.lease_id for e in events if isinstance(e, s.LeaseReleased)}
    assert set(leases) <= ended  # a lease it got is given back
