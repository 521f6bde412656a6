"""Admin reads from the read model wait for the caller's last write; one answered without it
says so (`x-read-model-stale: true`) instead of passing stale rows off as fresh."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest

from eventstore.store import EventStore
from gateway.admin.reads import STALE_HEADER, close_read_models
from modelforge.devstack.nats_server import NatsServer
from projections import projector
from tests.support.serving import InProcessGateway

from .helpers import migrated

TOKEN = "operator-token-for-tests"


@pytest.fixture
async def admin(
    private_nats: NatsServer, private_store: EventStore, fresh_database: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[httpx.AsyncClient]:
    """The admin API of an in-process gateway reading `fresh_database` (migrated; no projector yet)."""
    await migrated(fresh_database)
    monkeypatch.setenv("DATABASE_URL", fresh_database)
    gateway = InProcessGateway()
    await gateway.start(private_nats.url)
    assert gateway.replica is not None
    gateway.replica.edge.operator_token = TOKEN
    try:
        async with httpx.AsyncClient(
            base_url=f"{gateway.url}/admin/v1", headers={"authorization": f"Bearer {TOKEN}"}, timeout=60
        ) as client:
            yield client
    finally:
        await close_read_models()
        await gateway.stop()


async def test_a_read_the_projector_has_not_caught_up_with_is_marked_stale_and_a_caught_up_one_is_not(
    admin: httpx.AsyncClient, private_nats: NatsServer, fresh_database: str
) -> None:
    created = await admin.post("/clients", json={"name": "stale-reader", "scopes": ["rag.embedding@1"]})
    assert created.status_code == 200, created.text
    # No projector runs: the read model cannot have applied that write.
    behind = await admin.get("/scheduler/placements")
    assert behind.status_code == 200, behind.text
    assert behind.headers.get(STALE_HEADER) == "true"

    stop = asyncio.Event()
    running = asyncio.create_task(projector.run(fresh_database, private_nats.url, stop=stop, telemetry=False))
    try:
        caught_up = await admin.get("/scheduler/placements")
        assert caught_up.status_code == 200, caught_up.text
        assert STALE_HEADER not in caught_up.headers
    finally:
        stop.set()
        async with asyncio.timeout(10):
            await running
