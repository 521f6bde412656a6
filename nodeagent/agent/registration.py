"""Start-up: register the node (when new or changed), start a new worker generation, and reconcile
every accelerator to what this generation really holds — nothing, after a (re)start.

The node decision is pure (`decide_start`) and appended with the node's expected version, so two
processes claiming one node id cannot both take the same generation.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from eventstore.errors import ConcurrencyConflict
from eventstore.reading import latest_of_each
from eventstore.store import EventStore, ExpectedVersion
from nodeagent.agent.hardware import Hardware
from streams.codec import UnknownEvent
from streams.envelope import Actor
from streams.events import Event
from streams.events.control import AcceleratorSpec, NodeRegistered, WorkerStarted
from streams.events.serving import ResidencyReconciled
from streams.subjects import Aggregate

log = logging.getLogger("modelforge.agent.registration")

AGENT_VERSION = "0.1.0"
PROTOCOL_CAPABILITIES = (
    "deployment.load.v1",
    "deployment.invoke.v1",
    "deployment.health.v1",
    "deployment.drain.v1",
    "deployment.unload.v1",
    "deployment.probe.v1",
)


@dataclass(frozen=True)
class NodeFacts:
    node_id: str
    hostname: str
    hardware_fingerprint: str
    accelerators: tuple[AcceleratorSpec, ...]
    runtimes: tuple[str, ...]


@dataclass(frozen=True)
class NodeHistory:
    registered: NodeRegistered | None
    generation: int


def fold(events: Sequence[Event | UnknownEvent]) -> NodeHistory:
    registered: NodeRegistered | None = None
    generation = 0
    for event in events:
        match event:
            case NodeRegistered():
                registered = event
            case WorkerStarted(generation=started):
                generation = max(generation, started)
    return NodeHistory(registered, generation)


def decide_start(history: NodeHistory, facts: NodeFacts) -> list[Event]:
    """NodeRegistered when the node is new or what it is changed, then the next WorkerStarted."""
    events: list[Event] = []
    known = history.registered
    changed = known is None or (
        known.hardware_fingerprint,
        known.accelerators,
        known.protocol_capabilities,
        known.runtimes,
    ) != (facts.hardware_fingerprint, facts.accelerators, PROTOCOL_CAPABILITIES, facts.runtimes)
    if changed:
        events.append(
            NodeRegistered(
                node_id=facts.node_id,
                hostname=facts.hostname,
                hardware_fingerprint=facts.hardware_fingerprint,
                accelerators=facts.accelerators,
                protocol_capabilities=PROTOCOL_CAPABILITIES,
                runtimes=facts.runtimes,
                agent_version=AGENT_VERSION,
            )
        )
    events.append(WorkerStarted(node_id=facts.node_id, generation=history.generation + 1, residencies=()))
    return events


def facts_of(hardware: Hardware, runtimes: tuple[str, ...]) -> NodeFacts:
    return NodeFacts(hardware.node_id, hardware.hostname, hardware.fingerprint, hardware.specs, runtimes)


async def start_generation(
    store: EventStore, hardware: Hardware, runtimes: tuple[str, ...], actor: Actor
) -> int:
    """Append the node's start-up facts; returns this worker's generation."""
    facts = facts_of(hardware, runtimes)
    for _ in range(5):
        # (the fold keeps the latest registration and generation: what `latest_of_each` reads)
        records, version = await latest_of_each(store.client, Aggregate.NODE, hardware.node_id)
        events = decide_start(fold([r.event for r in records]), facts)
        expected = version if version else ExpectedVersion.NO_STREAM
        try:
            await store.append(Aggregate.NODE, hardware.node_id, events, expected, actor=actor)
        except ConcurrencyConflict:
            continue  # another writer moved the node on: reload and decide again
        started = events[-1]
        assert isinstance(started, WorkerStarted)
        break
    else:
        raise RuntimeError(f"node {hardware.node_id}: could not start a generation (constant conflicts)")
    for accelerator in hardware.accelerators:
        reconciled = ResidencyReconciled(
            accelerator_id=accelerator.id, generation=started.generation, held=(), dropped=()
        )
        await store.append(
            Aggregate.ACCELERATOR, accelerator.id, [reconciled], ExpectedVersion.ANY, actor=actor
        )
    log.info("node %s: worker generation %d started", hardware.node_id, started.generation)
    return started.generation
