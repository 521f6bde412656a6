"""Start-up: the node is registered once, each start is a new generation holding nothing, and
telemetry reports the CPU device's budget and the process's memory until a clean stop."""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from eventstore.connection import Connection
from streams import subjects
from streams.envelope import new_id
from streams.events import serving as s
from streams.events.control import NodeRegistered, WorkerStarted
from streams.messages import AcceleratorTelemetry
from streams.subjects import Aggregate
from tests.support.agents import AgentProcess, aggregate_events

BUDGET = 2 << 30


async def test_first_start_registers_the_node_and_a_restart_only_starts_a_new_generation(
    connection: Connection, agents: Callable[..., AgentProcess]
) -> None:
    agent = agents(f"node-{new_id()[:8]}", **{"--cpu-memory-budget": str(BUDGET)})
    first = await agent.start(connection)
    assert agent.stop() == 0
    second = await agent.start(connection)
    assert (first.generation, second.generation) == (1, 2)

    node_events = await aggregate_events(connection, Aggregate.NODE, agent.node)
    registered = [e for e in node_events if isinstance(e, NodeRegistered)]
    assert len(registered) == 1
    (cpu,) = registered[0].accelerators
    assert (cpu.accelerator_id, cpu.kind, cpu.total_bytes) == (f"{agent.node}-cpu0", "cpu", BUDGET)
    assert {"deployment.load.v1", "deployment.unload.v1"} <= set(registered[0].protocol_capabilities)
    assert [e.generation for e in node_events if isinstance(e, WorkerStarted)] == [1, 2]
    assert all(e.residencies == () for e in node_events if isinstance(e, WorkerStarted))
    reconciled = [
        e
        for e in await aggregate_events(connection, Aggregate.ACCELERATOR, cpu.accelerator_id)
        if isinstance(e, s.ResidencyReconciled)
    ]
    assert [(e.generation, e.held) for e in reconciled] == [(1, ()), (2, ())]


async def test_telemetry_reports_the_cpu_budget_and_the_process_memory_and_a_clean_stop(
    connection: Connection, agents: Callable[..., AgentProcess]
) -> None:
    agent = agents(f"node-{new_id()[:8]}", **{"--cpu-memory-budget": str(BUDGET)})
    sample = await agent.start(connection)
    assert (sample.node_id, sample.accelerator_id) == (agent.node, f"{agent.node}-cpu0")
    assert sample.total_bytes == BUDGET
    assert sample.used_bytes == sample.process_bytes > 0
    assert sample.residencies == []
    assert sample.healthy
    assert agent.stop() == 0
    js = connection.client.jetstream()
    last = await js.get_last_msg(
        subjects.TELEMETRY_STREAM, subjects.telemetry_subject(agent.node, sample.accelerator_id)
    )
    assert msgspec.json.decode(last.data or b"", type=AcceleratorTelemetry).healthy is False


async def test_the_agents_events_name_it_as_their_actor(
    connection: Connection, agents: Callable[..., AgentProcess]
) -> None:
    from eventstore import reading

    agent = agents(f"node-{new_id()[:8]}")
    await agent.start(connection)
    records, _ = await reading.load(connection.client, Aggregate.NODE, agent.node)
    assert {str(r.envelope.actor) for r in records if r.envelope} == {f"agent:{agent.node}"}
