"""Per-test isolation for the read side: a private nats-server (so odd messages published by one
test never reach another's projector) and a fresh database on the session PostgreSQL."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from eventstore.connection import Connection, connect
from eventstore.provision import provision
from eventstore.store import EventStore
from modelforge.devstack.nats_server import NatsServer, start_nats
from modelforge.devstack.postgres import PostgresServer
from modelforge.devstack.processes import stop_pid
from tests.support.serving import InProcessGateway

from .helpers import migrated

TOKEN = "operator-token-for-tests"


@pytest.fixture
def private_nats(scratch: Path) -> Iterator[NatsServer]:
    server = start_nats(scratch / f"nats-{uuid.uuid4().hex[:8]}", detach=False)
    yield server
    stop_pid(server.pid)


@pytest.fixture
async def private_store(private_nats: NatsServer) -> AsyncIterator[EventStore]:
    conn: Connection = await connect(private_nats.url, "projection-tests")
    await provision(conn.client)
    yield EventStore(conn)
    await conn.close()


@pytest.fixture
async def fresh_database(postgres_server: PostgresServer) -> AsyncIterator[str]:
    name = f"mfp_{uuid.uuid4().hex[:12]}"
    async with await psycopg.AsyncConnection.connect(postgres_server.admin_url, autocommit=True) as admin:
        await admin.execute(f'CREATE DATABASE "{name}"')
    yield postgres_server.url.rsplit("/", 1)[0] + f"/{name}"
    async with await psycopg.AsyncConnection.connect(postgres_server.admin_url, autocommit=True) as admin:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.asynccontextmanager
async def admin_api(nats_url: str) -> AsyncIterator[httpx.AsyncClient]:
    """The admin API of an in-process gateway on `nats_url`, reading the DATABASE_URL set (if any)."""
    gateway = InProcessGateway()
    await gateway.start(nats_url)
    assert gateway.replica is not None
    gateway.replica.edge.operator_token = TOKEN
    try:
        async with httpx.AsyncClient(
            base_url=f"{gateway.url}/admin/v1", headers={"authorization": f"Bearer {TOKEN}"}, timeout=60
        ) as client:
            yield client
    finally:
        await gateway.stop()


@pytest.fixture
async def admin(
    private_nats: NatsServer, private_store: EventStore, fresh_database: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[httpx.AsyncClient]:
    """The admin API of an in-process gateway reading `fresh_database` (migrated; no projector yet)."""
    await migrated(fresh_database)
    monkeypatch.setenv("DATABASE_URL", fresh_database)
    async with admin_api(private_nats.url) as client:
        yield client
