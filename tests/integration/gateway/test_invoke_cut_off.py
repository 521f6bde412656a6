"""An invoke in flight when the gateway's NATS connection drops (the server it went through is
lost), or when the agent's samples report a drop of its own, ends at once, as retryable, instead
of waiting for its deadline: its request or the reply may have been lost with that server, and
nothing else would say so."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import pytest
from nats.aio.msg import Msg
from nats.errors import NoRespondersError

from eventstore.connection import Connection, connect
from eventstore.store import EventStore
from gateway.serving.capacity import Grant
from gateway.serving.context import ServingContext
from gateway.serving.dispatch import InvokeCutOff, invoke
from gateway.serving.outputs import JSON_OUTPUT
from gateway.state.live import LiveState
from modelforge.devstack.nats_server import NatsServer
from streams import subjects
from streams.messages import AcceleratorTelemetry
from tests.support.cluster import connected_to_two_members

GRANT = Grant(
    lease_id="lease-a", accelerator_id="node-a-cpu0", node_id="node-a", deployment_id="dep-a", cold=False,
    fingerprint="",
)  # fmt: skip


def sample(reconnects: int) -> AcceleratorTelemetry:
    return AcceleratorTelemetry(
        node_id="node-a", accelerator_id="node-a-cpu0", generation=1, total_bytes=1 << 30, used_bytes=0,
        process_bytes=0, observed_at_unix_ms=int(time.time() * 1000), residencies=["dep-a"], healthy=True,
        reconnects=reconnects,
    )  # fmt: skip


async def interest_reached(agent: Connection, gateway: Connection) -> None:
    """Once the agent's subscriptions so far are known on the gateway's server: a route carries
    interest in order, so one made after them answering from there says so."""

    async def answer(msg: Msg) -> None:
        await msg.respond(b"")

    await agent.client.subscribe("cut-off.ready", cb=answer)
    async with asyncio.timeout(60):
        while True:
            with contextlib.suppress(NoRespondersError):
                await gateway.client.request("cut-off.ready", b"", timeout=60)
                return


async def test_an_invoke_in_flight_when_the_gateways_server_is_lost_ends_as_retryable(scratch: Path) -> None:
    members = connected_to_two_members(scratch / "cut-off-cluster", "cut-off-gateway", "cut-off-agent")
    async with members as (cluster, gateway, agent):
        arrived = asyncio.Event()

        async def hold(msg: Msg) -> None:  # a model still running: no reply yet
            arrived.set()

        await agent.client.subscribe(subjects.invoke_subject("node-a", "dep-a"), cb=hold)
        await interest_reached(agent, gateway)
        ctx = ServingContext(EventStore(gateway), LiveState(), gateway.client, "gateway-a")
        invoking = asyncio.create_task(
            invoke(ctx, GRANT, "rag.embedding@1", "request-a", b"{}", time.time() + 600, JSON_OUTPUT)
        )
        async with asyncio.timeout(60):
            await arrived.wait()
        cluster.kill(cluster.members[0].name)  # the gateway's
        with pytest.raises(InvokeCutOff, match="gateway's NATS connection dropped"):
            async with asyncio.timeout(60):  # far less than the invoke's deadline
                await invoking


async def test_an_invoke_in_flight_when_the_agent_reports_a_dropped_connection_ends_as_retryable(
    module_nats: NatsServer,
) -> None:
    gateway = await connect(module_nats.url, "reconnect-gateway")
    agent = await connect(module_nats.url, "reconnect-agent")
    try:
        arrived = asyncio.Event()

        async def hold(msg: Msg) -> None:  # the request got through; the next one might not have
            arrived.set()

        await agent.client.subscribe(subjects.invoke_subject("node-a", "dep-a"), cb=hold)
        await agent.client.flush()
        live = LiveState()
        live.apply_telemetry(sample(reconnects=0))
        ctx = ServingContext(EventStore(gateway), live, gateway.client, "gateway-a")
        invoking = asyncio.create_task(
            invoke(ctx, GRANT, "rag.embedding@1", "request-a", b"{}", time.time() + 600, JSON_OUTPUT)
        )
        async with asyncio.timeout(60):
            await arrived.wait()
        live.apply_telemetry(sample(reconnects=1))  # as the live view's telemetry follower applies it
        with pytest.raises(InvokeCutOff, match="agent reported a drop"):
            async with asyncio.timeout(60):  # far less than the invoke's deadline
                await invoking
    finally:
        await gateway.close()
        await agent.close()
