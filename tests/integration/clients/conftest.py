"""Two gateway "replicas" on two separate NATS connections, each with a directory and a limiter."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import pytest

from eventstore.connection import Connection, connect
from eventstore.store import EventStore
from gateway.clients.directory import ClientDirectory
from gateway.clients.limit_streams import provision_limits
from gateway.clients.limits import RequestLimiter
from gateway.clients.service import ClientService
from streams.envelope import utcnow


@dataclass
class WallClock:
    """Real time plus an offset the test moves (for expiry and grace, without sleeping)."""

    offset: timedelta = timedelta(0)

    def __call__(self) -> datetime:
        return utcnow() + self.offset


@dataclass
class FixedClock:
    """POSIX seconds fixed mid-minute, so a test's requests never straddle a rate window."""

    now: float = field(default_factory=lambda: (time.time() // 60) * 60 + 30)

    def __call__(self) -> float:
        return self.now


@dataclass
class Replica:
    connection: Connection
    directory: ClientDirectory
    limiter: RequestLimiter


@dataclass
class Gateways:
    a: Replica
    b: Replica
    wall: WallClock
    minute: FixedClock

    @property
    def both(self) -> tuple[Replica, Replica]:
        return self.a, self.b

    async def applied(self, sequence: int) -> None:
        """Both directories reflect `sequence`; within a second, as the issue requires."""
        for replica in self.both:
            await replica.directory.wait_until_applied(sequence, timeout=1.0)


@pytest.fixture
def unique_name() -> str:
    return f"app-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def service(store: EventStore) -> ClientService:
    return ClientService(store)


@pytest.fixture
async def gateways(nats_url: str, connection: Connection) -> AsyncIterator[Gateways]:
    await provision_limits(connection.client)
    wall, minute = WallClock(), FixedClock()
    replicas = []
    for name in ("gateway-a", "gateway-b"):
        conn = await connect(nats_url, name)
        directory = ClientDirectory(conn.client, clock=wall)
        await directory.start()
        await directory.wait_ready(timeout=5.0)
        replicas.append(Replica(conn, directory, RequestLimiter(conn.client, clock=minute)))
    yield Gateways(replicas[0], replicas[1], wall, minute)
    for replica in replicas:
        await replica.limiter.close()
        await replica.directory.close()
        await replica.connection.close()
