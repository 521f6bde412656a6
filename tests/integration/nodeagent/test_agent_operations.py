"""Control jobs on a node with two devices. An agent process on a machine without NVIDIA GPUs has
exactly one (`hardware.detect`: the NVML GPUs, else one CPU device), so these tests run the agent's
`Operations` in-process on a hardware description of two CPU devices, with the real event store,
invoke server and MiniLM loads; and the CPU threads a load runs on."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest

from artifacts import verify_artifact_set
from eventstore.connection import Connection
from eventstore.store import EventStore
from nodeagent.agent.hardware import Hardware, cpu_accelerator, fingerprint
from nodeagent.agent.invoke import InvokeServer
from nodeagent.agent.operations import AgentState, Operations
from nodeagent.agent.residency import manifest_from_job
from nodeagent.runtimes.onnx import OnnxRuntimeCpu
from nodeagent.worker.loading import load_blocking
from streams import codes
from streams.envelope import Actor, ActorKind, new_id
from streams.events import serving as s
from streams.subjects import Aggregate
from tests.support.agents import MINILM, aggregate_events, load_job


def two_cpu_devices(node: str) -> Hardware:
    first = cpu_accelerator(node, 4 << 30)
    second = dataclasses.replace(
        first, spec=msgspec.structs.replace(first.spec, accelerator_id=f"{node}-cpu1")
    )
    specs = (first.spec, second.spec)
    return Hardware(node, "two-devices", (first, second), fingerprint(specs))


@pytest.fixture
async def two_device_node(
    connection: Connection, store: EventStore, artifact_root: Path
) -> AsyncIterator[AgentState]:
    node = f"node-{new_id()[:8]}"
    invokes = InvokeServer(connection.client, node)
    state = AgentState(
        node, artifact_root, two_cpu_devices(node), 1, store, invokes, Actor(ActorKind.AGENT, node)
    )
    yield state
    await invokes.close()
    await state.close()


async def test_a_load_for_a_deployment_held_on_another_device_of_the_node_is_refused_and_it_stays_put(
    connection: Connection, two_device_node: AgentState, minilm_manifest: list[dict[str, object]]
) -> None:
    node = two_device_node.node_id
    held, other = (a.id for a in two_device_node.hardware.accelerators)
    operations = Operations(two_device_node)
    first = load_job(node, "dep-twice", MINILM, minilm_manifest)
    await operations.load(first)
    again = msgspec.structs.replace(first, job_id=new_id(), load_id=new_id(), accelerator_id=other)
    await operations.load(again)

    (refused,) = await aggregate_events(connection, Aggregate.ACCELERATOR, other)  # nothing loaded there
    assert isinstance(refused, s.ResidencyLoadFailed)
    assert (refused.load_id, refused.code) == (again.load_id, codes.RESIDENCY_CONFLICT.code)
    assert held in refused.detail
    # The copy is where it was, and still serves.
    assert [type(e) for e in await aggregate_events(connection, Aggregate.ACCELERATOR, held)] == [
        s.ResidencyLoading,
        s.ResidencyLoaded,
    ]
    assert two_device_node.residencies_on(held) == ["dep-twice"]
    assert two_device_node.residencies_on(other) == []
    assert two_device_node.invokes.serving("dep-twice")


async def test_a_worker_runs_its_cpu_runtime_on_the_threads_its_load_names(
    artifact_root: Path, minilm_manifest: list[dict[str, object]]
) -> None:
    verified = verify_artifact_set(artifact_root / MINILM, manifest_from_job(minilm_manifest))
    warm = await asyncio.to_thread(load_blocking, verified, "rag.embedding@1", None, 8, 1)
    try:
        assert isinstance(warm.runtime, OnnxRuntimeCpu)
        assert warm.runtime.session_options().intra_op_num_threads == 1
    finally:
        await warm.server.close()
        warm.runtime.unload()
