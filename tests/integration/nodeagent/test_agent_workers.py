"""Each deployment on a node runs in a worker process of its own under the agent: its memory is the
worker's, an unload kills the worker and gives the memory back, and a worker that dies takes only
its own model (and the invokes it was running) with it."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable

import pytest

from eventstore.connection import Connection
from nodeagent.runtimes.process_memory import rss_of
from streams import codes, subjects
from streams.envelope import new_id
from streams.events import serving as s
from streams.subjects import Aggregate
from tests.integration.nodeagent.test_agent_serving import embeddings_of, invoke, load, unload
from tests.support.agents import WAIT_S, AgentProcess, gone, next_event

# What the agent's own RSS may grow by over a load and an unload (its job and event bookkeeping);
# a model held in the agent would be several times this (MiniLM alone is ~90 MiB of weights).
AGENT_GROWTH_BOUND = 32 << 20


async def test_an_unload_kills_the_worker_and_the_agent_is_back_near_its_baseline(
    connection: Connection, agents: Callable[..., AgentProcess], minilm_manifest: list[dict[str, object]]
) -> None:
    agent = agents(f"node-{new_id()[:8]}")
    await agent.start(connection)
    baseline = rss_of(agent.pid)
    loaded = await load(connection, agent, "dep-returned", minilm_manifest)
    assert isinstance(loaded, s.ResidencyLoaded), loaded
    worker = agent.workers()["dep-returned"]
    embeddings_of(await invoke(connection, agent.node, "dep-returned", ["served by the worker"]))

    unloaded = await unload(connection, agent, "dep-returned")
    assert isinstance(unloaded, s.ResidencyUnloaded), unloaded

    assert agent.workers() == {}
    assert gone(worker)  # killed and reaped
    assert unloaded.reclaimed_bytes >= loaded.measured_bytes // 2  # all the worker held
    grown = rss_of(agent.pid) - baseline
    print(
        f"agent RSS {baseline >> 20} MiB at start, grown {grown / (1 << 20):.1f} MiB; worker held "
        f"{loaded.measured_bytes >> 20} MiB, gave back {unloaded.reclaimed_bytes >> 20} MiB"
    )
    assert grown < AGENT_GROWTH_BOUND


async def test_each_deployment_is_measured_as_its_own_worker_process(
    connection: Connection, serving_agent: AgentProcess, minilm_manifest: list[dict[str, object]]
) -> None:
    first = await load(connection, serving_agent, "dep-own-a", minilm_manifest)
    second = await load(connection, serving_agent, "dep-own-b", minilm_manifest)
    assert isinstance(first, s.ResidencyLoaded)
    assert isinstance(second, s.ResidencyLoaded)
    workers = serving_agent.workers()

    assert workers["dep-own-a"] != workers["dep-own-b"]
    for loaded, pid in ((first, workers["dep-own-a"]), (second, workers["dep-own-b"])):
        assert loaded.baseline_bytes == 0  # the worker did not exist before its load
        assert loaded.measured_bytes == loaded.loaded_bytes
        assert loaded.loaded_bytes == pytest.approx(rss_of(pid), rel=0.1)
    # The same model in two processes: each holds about as much, neither the other's share too.
    assert second.measured_bytes == pytest.approx(first.measured_bytes, rel=0.25)


async def test_a_worker_killed_mid_invoke_fails_that_invoke_and_the_agent_serves_on(
    connection: Connection, agents: Callable[..., AgentProcess], minilm_manifest: list[dict[str, object]]
) -> None:
    agent = agents(f"node-{new_id()[:8]}")
    await agent.start(connection)
    assert isinstance(await load(connection, agent, "dep-crash", minilm_manifest), s.ResidencyLoaded)
    assert isinstance(await load(connection, agent, "dep-bystander", minilm_manifest), s.ResidencyLoaded)
    # A plain subscriber sees each request the agent's queue group gets: the moment to kill.
    seen = await connection.client.subscribe(subjects.invoke_subject(agent.node, "dep-crash"))
    long_texts = [" ".join(f"word{i}-{j}" for j in range(200)) for i in range(256)]
    pending = asyncio.ensure_future(invoke(connection, agent.node, "dep-crash", long_texts, timeout=WAIT_S))
    await seen.next_msg(timeout=WAIT_S)
    await seen.unsubscribe()
    os.kill(agent.workers()["dep-crash"], signal.SIGKILL)

    reply = await pending
    assert (reply.ok, reply.code) == (False, codes.INFERENCE_FAILED.code)
    assert "died (killed by SIGKILL)" in reply.message
    gone = await next_event(
        connection,
        Aggregate.ACCELERATOR,
        f"{agent.node}-cpu0",
        lambda e: isinstance(e, s.ResidencyUnloadFailed) and e.deployment_id == "dep-crash",
    )
    assert (gone.still_resident, gone.code) == (False, codes.WORKER_RESTART_RECONCILED.code)
    assert agent.running
    embeddings_of(await invoke(connection, agent.node, "dep-bystander", ["still served"]))
    assert isinstance(await load(connection, agent, "dep-crash", minilm_manifest), s.ResidencyLoaded)
    embeddings_of(await invoke(connection, agent.node, "dep-crash", ["served again"]))


async def exited(pid: int) -> None:
    """Return once process `pid` (not necessarily a child of this one) has exited."""
    pidfd = os.pidfd_open(pid)
    done = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().add_reader(pidfd, done.set_result, None)  # readable once it exits
    try:
        async with asyncio.timeout(WAIT_S):
            await done
    finally:
        asyncio.get_running_loop().remove_reader(pidfd)
        os.close(pidfd)


async def test_a_killed_agent_takes_its_workers_with_it(
    connection: Connection, agents: Callable[..., AgentProcess], minilm_manifest: list[dict[str, object]]
) -> None:
    agent = agents(f"node-{new_id()[:8]}")
    await agent.start(connection)
    assert isinstance(await load(connection, agent, "dep-orphan", minilm_manifest), s.ResidencyLoaded)
    worker = agent.workers()["dep-orphan"]

    agent.kill()  # SIGKILL: the agent runs no code of its own to stop its workers

    await exited(worker)
