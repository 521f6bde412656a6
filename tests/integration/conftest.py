"""A nats-server running deploy/nats/nats.conf, for the deployment tests (one per module)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from eventstore.connection import Connection, connect
from eventstore.provision import provision
from gateway.clients.limit_streams import provision_limits
from modelforge.devstack.nats_server import NatsServer
from tests.integration.deployment_nats import deployment_server, url


@pytest.fixture(scope="module")
def deployment_nats(scratch: Path) -> Iterator[NatsServer]:
    with deployment_server(scratch) as server:
        yield server


@pytest.fixture(scope="module")
async def provisioner(deployment_nats: NatsServer) -> AsyncIterator[Connection]:
    """The provisioner's connection, once it made the streams as compose.yaml's provision service does."""
    conn = await connect(url(deployment_nats, "provisioner"), "deployment-provisioner")
    await provision(conn.client)
    await provision_limits(conn.client)
    yield conn
    await conn.close()
