"""A telemetry sample the agent sends while MF_TELEMETRY has no leader (a cluster electing one after
the server that led it left: nothing answers the publish) is sent again, and lands once the stream
answers: a live node must not go two intervals without a sample, which makes it lost, because of
one election."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
from nats.js.client import JetStreamContext
from nats.js.errors import NoStreamResponseError

from eventstore.connection import connect
from eventstore.provision import provision
from modelforge.devstack.nats_server import NatsServer
from nodeagent.agent.hardware import Hardware, cpu_accelerator
from nodeagent.agent.telemetry import TelemetryPublisher
from streams import subjects
from streams.messages import AcceleratorTelemetry
from tests.support.agents import WAIT_S


class RefusalSeen:
    """The publisher's JetStream context, noting when a publish went unanswered; every call goes
    to the real server."""

    def __init__(self, js: JetStreamContext) -> None:
        self.js = js
        self.refused = asyncio.Event()

    async def publish(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await self.js.publish(*args, **kwargs)
        except NoStreamResponseError:
            self.refused.set()
            raise


async def test_a_sample_sent_while_its_stream_has_no_leader_is_sent_again_and_lands(
    private_nats: NatsServer,
) -> None:
    connection = await connect(private_nats.url, "telemetry-tests")
    try:
        await provision(connection.client)
        js = connection.client.jetstream()
        config = (await js.stream_info(subjects.TELEMETRY_STREAM)).config
        await js.delete_stream(subjects.TELEMETRY_STREAM)  # nothing answers a publish, as in an election
        node = "node-telemetry"
        cpu = cpu_accelerator(node, 1 << 30)
        publisher = TelemetryPublisher(
            connection.client, Hardware(node, "host", (cpu,), "fp"), 3, lambda _: [], lambda _: [], 30.0
        )
        seen = RefusalSeen(publisher.js)
        publisher.js = seen  # type: ignore[assignment]
        sending = asyncio.create_task(publisher.publish_all())
        async with asyncio.timeout(WAIT_S):
            await seen.refused.wait()
        await js.add_stream(config)  # a leader again
        async with asyncio.timeout(WAIT_S):
            await sending
        stored = await js.get_last_msg(subjects.TELEMETRY_STREAM, subjects.telemetry_subject(node, cpu.id))
    finally:
        await connection.close()
    sample = msgspec.json.decode(stored.data, type=AcceleratorTelemetry)
    assert (sample.node_id, sample.generation, sample.healthy) == (node, 3, True)
