"""A reply an agent published just before its NATS server was lost may have gone with that server:
the agent publishes the replies of the moments before a drop again once it is connected to
another, so the gateway does not wait for one until its deadline (a second copy is ignored)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import msgspec
from nats.aio.msg import Msg

from nodeagent.agent.invoke import InvokeServer
from nodeagent.agent.residency import LoadMeasurement, Residency
from nodeagent.worker.protocol import Served
from streams import subjects
from streams.messages import InvokeReply, InvokeRequest, WorkerTimings
from tests.support.cluster import connected_to_two_members


class AnsweringWorker:
    """A worker process's stand-in: answers every invoke at once."""

    async def invoke(self, payload: bytes, timeout_s: float, input_type: str = "") -> Served:
        return Served(body=b"[1.0]", timings=WorkerTimings())


async def test_a_reply_published_before_the_agents_server_is_lost_is_published_again(scratch: Path) -> None:
    members = connected_to_two_members(scratch / "resend-cluster", "resend-agent", "resend-gateway")
    async with members as (cluster, agent, gateway):
        invokes = InvokeServer(agent.client, "node-a", resend_window_s=600)  # the whole test is "just before"
        try:
            invokes.resend_on_drop(agent)
            residency = Residency(
                deployment_id="dep-a", accelerator_id="node-a-cpu0", capability="rag.embedding@1", generation=1,
                worker=AnsweringWorker(),  # type: ignore[arg-type]
                measurement=LoadMeasurement("onnx", 0, 0, 0, 0.0, 0.0),
            )  # fmt: skip
            await invokes.start(residency)
            replies: asyncio.Queue[Msg] = asyncio.Queue()

            async def collect(msg: Msg) -> None:
                replies.put_nowait(msg)

            inbox = gateway.client.new_inbox()
            await gateway.client.subscribe(inbox, cb=collect)
            request = InvokeRequest(
                request_id="request-a", capability="rag.embedding@1", deployment_id="dep-a",
                deadline_unix_ms=int((time.time() + 600) * 1000), payload=msgspec.Raw(b"{}"),
            )  # fmt: skip
            await gateway.client.flush()
            async with asyncio.timeout(60):
                while True:  # until the agent's interest has reached the gateway's server
                    await gateway.client.publish(
                        subjects.invoke_subject("node-a", "dep-a"), msgspec.json.encode(request), reply=inbox
                    )
                    first = await replies.get()
                    if first.data:
                        break
            assert msgspec.json.decode(first.data, type=InvokeReply).ok
            cluster.kill(cluster.members[0].name)  # the agent's
            async with asyncio.timeout(60):
                again = await replies.get()
            assert again.data == first.data
        finally:
            await invokes.close()
