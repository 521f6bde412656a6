"""A request's records are held by the gateway's connection for a moment before they are written
(`OrderedFlushClient.held_for_s`); an admin read through that gateway writes what it holds and
waits for it, so a request answered there is in the history read right after, however long the
hold."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from eventstore.connection import OrderedFlushClient
from tests.integration.gateway.conftest import SHARES_THE_STACK, Stack, stack_admin
from tests.integration.gateway.residents import embed, serving_ctx
from tests.integration.projections.helpers import projecting

pytestmark = SHARES_THE_STACK
TOKEN = "operator-token-for-held-record-tests"


@pytest.fixture
def held_an_hour(stack: Stack) -> Iterator[OrderedFlushClient]:
    """The stack gateway's connection holding request records for an hour (nothing but a read, or
    a flush, writes them), as it holds them by default after the test."""
    client = serving_ctx(stack).client
    assert isinstance(client, OrderedFlushClient)
    client.held_for_s = 3600.0
    yield client
    del client.held_for_s  # (the class's own again)
    client.write_held()


async def answered(stack: Stack) -> str:
    async with httpx.AsyncClient(timeout=60) as http:
        response = await embed(http, stack, "a request whose records are held")
    assert response.status_code == 200, response.text
    request_id: str = response.json()["request_id"]
    return request_id


async def test_the_history_folded_from_the_log_shows_a_request_answered_a_moment_before(
    stack: Stack, held_an_hour: OrderedFlushClient
) -> None:
    request_id = await answered(stack)
    assert held_an_hour._held  # its records wait in the gateway

    async with stack_admin(stack, TOKEN) as admin:
        read = await admin.get("/requests", params={"limit": 1000})

    assert read.status_code == 200, read.text
    assert request_id in [row["request_id"] for row in read.json()]


async def test_the_read_model_shows_a_request_answered_a_moment_before(
    stack: Stack, held_an_hour: OrderedFlushClient, read_model_database: str
) -> None:
    async with projecting(read_model_database, stack.nats_url), stack_admin(stack, TOKEN) as admin:
        request_id = await answered(stack)
        assert held_an_hour._held

        read = await admin.get("/requests", params={"limit": 1000})

    assert read.status_code == 200, read.text
    assert "x-read-model-stale" not in read.headers
    assert request_id in [row["request_id"] for row in read.json()]
