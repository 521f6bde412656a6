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
        subject = subjects.telemetry_subject(node, cpu.id)

        async def stored_reconnects() -> int:
            """The count in the sample MF_TELEMETRY holds, as a gateway reads it (its leader's)."""
            stored = await reader.client.jetstream().get_last_msg(subjects.TELEMETRY_STREAM, subject)
            assert stored.data is not None
            return msgspec.json.decode(stored.data, type=AcceleratorTelemetry).reconnects

        await publisher.publish_all()  # acknowledged: nothing of it is in flight through the server
        first = await stored_reconnects()
        cluster.kill(cluster.members[0].name)  # the agent's
        async with asyncio.timeout(WAIT_S):
            await publisher.nudge.wait()  # its run loop sends now, not after its interval
        await publisher.publish_all()  # sent once connected to another server
        assert [first, await stored_reconnects()] == [0, 1]
