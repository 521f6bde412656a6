"""A gateway refuses a node event whose payload speaks for another node than its subject's: the
live view leaves it out and the gateway records `ForgedEventRefused` (where from, what it claimed,
none of its content) on the sender's node aggregate."""

from __future__ import annotations

from eventstore.connection import connect
from eventstore.store import EventStore, ExpectedVersion
from modelforge.devstack.nats_server import NatsServer
from streams import subjects
from streams.events import control as c
from streams.events.identity import ForgedEventRefused
from streams.subjects import Aggregate
from tests.support.agents import aggregate_events
from tests.support.serving import InProcessGateway

WAIT_S = 30.0  # a bound on a wait that ends once the gateway's upkeep appended


def registration(node: str, accelerator: str) -> c.NodeRegistered:
    spec = c.AcceleratorSpec(accelerator_id=accelerator, kind="cpu", name="cpu", total_bytes=1 << 30)
    return c.NodeRegistered(
        node_id=node,
        hostname=node,
        hardware_fingerprint="f",
        accelerators=(spec,),
        protocol_capabilities=(),
        runtimes=("onnx",),
        agent_version="1",
    )


async def test_a_registration_for_another_node_is_refused_and_the_refusal_recorded(
    module_nats: NatsServer,
) -> None:
    gateway = InProcessGateway()
    await gateway.start(module_nats.url)
    connection = await connect(module_nats.url, "forger")
    try:
        store = EventStore(connection)
        await store.append(
            Aggregate.NODE, "honest", [registration("honest", "honest-cpu0")], ExpectedVersion.ANY
        )
        # On the forger's own node subject (all its NATS user may publish), claiming the honest node.
        forged = await store.append(
            Aggregate.NODE, "forger", [registration("honest", "forger-cpu0")], ExpectedVersion.ANY
        )
        assert gateway.replica is not None
        live = gateway.replica.edge.ctx.live
        # the refusal lands on the forger's node aggregate, after the forged event
        assert await live.wait_for(lambda: live.node_versions.get("forger", 0) > forged, WAIT_S)
        recorded = await aggregate_events(connection, Aggregate.NODE, "forger")
    finally:
        await connection.close()
        await gateway.stop()
    assert recorded[1:] == [
        ForgedEventRefused(
            node_id="forger",
            claimed_node_id="honest",
            subject=subjects.event_subject(Aggregate.NODE, "forger", "NodeRegistered"),
            refused_type="NodeRegistered",
            refused_sequence=forged,
        )
    ]
    assert [a.accelerator_id for a in live.catalog.nodes["honest"].accelerators] == ["honest-cpu0"]
    assert "forger" not in live.catalog.nodes
