"""An invoke in flight when the gateway's NATS connection drops (the server it went through is
lost) ends at once, as retryable, instead of waiting for its deadline: its request or the reply
may have been lost with that server, and nothing else would say so."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from nats.aio.msg import Msg

from eventstore.connection import connect
from eventstore.store import EventStore
from gateway.serving.capacity import Grant
from gateway.serving.context import ServingContext
from gateway.serving.dispatch import InvokeCutOff, invoke
from gateway.state.live import LiveState
from streams import subjects
from tests.support.cluster import running_cluster


async def test_an_invoke_in_flight_when_the_gateways_server_is_lost_ends_as_retryable(scratch: Path) -> None:
    with running_cluster(scratch / "cut-off-cluster") as cluster:
        gateway_server, agent_server = cluster.members[0], cluster.members[1]
        gateway = await connect(gateway_server.url, "cut-off-gateway")
        agent = await connect(agent_server.url, "cut-off-agent")
        try:
            arrived = asyncio.Event()

            async def hold(msg: Msg) -> None:  # a model still running: no reply yet
                arrived.set()

            await agent.client.subscribe(subjects.invoke_subject("node-a", "dep-a"), cb=hold)
            await agent.client.flush()
            ctx = ServingContext(EventStore(gateway), LiveState(), gateway.client, "gateway-a")
            grant = Grant(
                lease_id="lease-a", accelerator_id="node-a-cpu0", node_id="node-a", deployment_id="dep-a",
                cold=False, fingerprint="",
            )  # fmt: skip
            invoking = asyncio.create_task(
                invoke(ctx, grant, "rag.embedding@1", "request-a", b"{}", time.time() + 600)
            )
            async with asyncio.timeout(60):
                await arrived.wait()
            cluster.kill(gateway_server.name)
            with pytest.raises(InvokeCutOff):
                async with asyncio.timeout(60):  # far less than the invoke's deadline
                    await invoking
        finally:
            await gateway.wait_connected(60)  # to another member: a reconnecting client cannot drain
            await gateway.close()
            await agent.close()
