"""An agent whose NATS connection drops (its server lost) counts the drop in its telemetry and
sends a sample at once, not at its next interval: the gateways then give up the invokes they sent
it before, which may have been lost with that server (gateway.state.reconnects)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec

from eventstore.provision import provision
from nodeagent.agent.hardware import Hardware, cpu_accelerator
from nodeagent.agent.telemetry import TelemetryPublisher
from streams import subjects
from streams.messages import AcceleratorTelemetry
from tests.support.agents import WAIT_S
from tests.support.cluster import connected_to_two_members, lead_from


async def test_an_agents_dropped_connection_is_counted_in_its_samples_and_wakes_its_publisher(
    scratch: Path,
) -> None:
    members = connected_to_two_members(
        scratch / "reconnects-cluster", "reconnects-agent", "reconnects-reader"
    )
    async with members as (cluster, agent, reader):
        reader_server = cluster.members[1]
        await provision(reader.client, 3)
        await lead_from(reader, subjects.TELEMETRY_STREAM, reader_server.name)  # no election here
        node = "node-reconnects"
        cpu = cpu_accelerator(node, 1 << 30)
        # The agent's default interval: it bounds a sample's publish (and its resends) as in
        # production, so an ack lost in the drop costs seconds, not the test's whole time. (Its run
        # loop is not started here: only `nudge` says a sample is due.)
        publisher = TelemetryPublisher(
            agent.client, Hardware(node, "host", (cpu,), "fp"), 1, lambda _: [], lambda _: [], 5.0
        )
        publisher.count_drops(agent)
        samples = await reader.client.subscribe(subjects.telemetry_subject(node, cpu.id))
        # The subscription is only written to the reader's buffer: a round trip makes its server
        # hold it before the first sample, which reaches that server by another way (its route).
        await reader.client.flush()
        await publisher.publish_all()  # acknowledged: nothing of it is in flight through the server
        cluster.kill(cluster.members[0].name)  # the agent's
        async with asyncio.timeout(WAIT_S):
            await publisher.nudge.wait()  # its run loop sends now, not after its interval
        await publisher.publish_all()  # sent once connected to another server
        sent = [await samples.next_msg(WAIT_S) for _ in range(2)]
        counts = [msgspec.json.decode(m.data, type=AcceleratorTelemetry).reconnects for m in sent]
        assert counts == [0, 1]
