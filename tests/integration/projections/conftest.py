"""Per-test isolation for the read side: a private nats-server (so odd messages published by one
test never reach another's projector) and a fresh database on the session PostgreSQL."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import httpx
import pytest

from eventstore.store import EventStore
from gateway.contracts import register_contracts
from modelforge.devstack.nats_server import NatsServer
from tests.support.serving import InProcessGateway

from .helpers import migrated

TOKEN = "operator-token-for-tests"


@contextlib.asynccontextmanager
async def admin_gateway(nats_url: str) -> AsyncIterator[tuple[InProcessGateway, httpx.AsyncClient]]:
    """An in-process gateway on `nats_url`, reading the DATABASE_URL set (if any), and its admin API."""
    gateway = InProcessGateway()
    await gateway.start(nats_url)
    assert gateway.replica is not None
    gateway.replica.edge.operator_token = TOKEN
    try:
        async with httpx.AsyncClient(
            base_url=f"{gateway.url}/admin/v1", headers={"authorization": f"Bearer {TOKEN}"}, timeout=60
        ) as client:
            yield gateway, client
    finally:
        await gateway.stop()


@contextlib.asynccontextmanager
async def admin_api(nats_url: str) -> AsyncIterator[httpx.AsyncClient]:
    """The admin API of an in-process gateway on `nats_url` (see `admin_gateway`)."""
    async with admin_gateway(nats_url) as (_, client):
        yield client


@pytest.fixture
async def admin(
    private_nats: NatsServer, private_store: EventStore, fresh_database: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[httpx.AsyncClient]:
    """The admin API of an in-process gateway reading `fresh_database` (migrated; no projector yet),
    started on streams provisioned as `modelforge provision` leaves them: its start writes nothing."""
    await register_contracts(private_store)
    await migrated(fresh_database)
    monkeypatch.setenv("DATABASE_URL", fresh_database)
    async with admin_api(private_nats.url) as client:
        yield client
