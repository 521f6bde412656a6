"""A gateway's live view starts caught up with the telemetry stored before it, not only with the
events: a replica that says it is ready knows which nodes are live."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from eventstore.connection import connect
from eventstore.provision import provision
from gateway.state.live import LiveState
from modelforge.devstack.nats_server import NatsServer, start_nats
from modelforge.devstack.processes import stop_pid
from streams import subjects
from streams.messages import AcceleratorTelemetry


@pytest.fixture
def empty_nats(scratch: Path) -> Iterator[NatsServer]:
    """A server of its own: no events, so nothing else holds the view's start back."""
    server = start_nats(scratch / f"nats-live-{uuid.uuid4().hex[:8]}", detach=False)
    yield server
    stop_pid(server.pid)


def sample(node: str, n: int) -> AcceleratorTelemetry:
    return AcceleratorTelemetry(
        node_id=node, accelerator_id=f"{node}-cpu{n}", generation=1, total_bytes=1 << 34, used_bytes=1 << 30,
        process_bytes=1 << 29, observed_at_unix_ms=int(time.time() * 1000), residencies=[], healthy=True,
    )  # fmt: skip


async def test_a_started_view_holds_every_stored_sample_and_counts_their_node_live(
    empty_nats: NatsServer,
) -> None:
    conn = await connect(empty_nats.url, "live-start-test")
    live = LiveState()
    try:
        await provision(conn.client)
        js = conn.client.jetstream()
        for n in range(3):
            stored = sample("node-a", n)
            await js.publish(
                subjects.telemetry_subject(stored.node_id, stored.accelerator_id), msgspec.json.encode(stored)
            )
        await live.start(conn.client)
        assert sorted(live.telemetry) == ["node-a-cpu0", "node-a-cpu1", "node-a-cpu2"]
        assert live.node_live("node-a")
    finally:
        await live.stop()
        await conn.close()
