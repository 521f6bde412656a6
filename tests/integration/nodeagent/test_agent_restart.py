"""A SIGKILLed agent loses no control job: a load in progress is delivered again to the restarted
agent (or, out of attempts, fails with LEASE_TIMEOUT); an invoke in flight gets no reply (the
gateway owns the deadline) and the node answers no-responders at once; the new generation
reconciles every residency to cold. A SIGTERMed agent answers the invokes it was running first."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

from eventstore.connection import Connection
from streams import codes, subjects
from streams.envelope import new_id
from streams.events import serving as s
from streams.subjects import Aggregate
from tests.integration.nodeagent.test_agent_serving import (
    answered,
    drain,
    embeddings_of,
    invoke,
    invokes_sent,
    load,
)
from tests.support.agents import (
    MINILM,
    PADDED,
    WAIT_S,
    AgentProcess,
    load_job,
    load_outcome,
    manifest_records,
    next_event,
    publish_job,
    stopped,
)


async def kill_during_load(
    connection: Connection, agent: AgentProcess, manifest: list[dict[str, object]]
) -> s.ResidencyLoading:
    job = load_job(agent.node, "dep-killed", PADDED, manifest)
    await publish_job(connection, job)
    loading: s.ResidencyLoading = await next_event(
        connection,
        Aggregate.ACCELERATOR,
        job.accelerator_id,
        lambda e: isinstance(e, s.ResidencyLoading) and e.load_id == job.load_id,
    )
    agent.kill()  # mid-verification of the padded set: it has not finished loading
    return loading


@pytest.fixture(scope="module")
def padded_manifest(artifact_root: Path) -> list[dict[str, object]]:
    return manifest_records(artifact_root / PADDED)


async def test_a_load_killed_mid_way_is_delivered_again_to_the_next_generation(
    connection: Connection, agents: Callable[..., AgentProcess], padded_manifest: list[dict[str, object]]
) -> None:
    agent = agents(f"node-{new_id()[:8]}")
    await agent.start(connection)
    loading = await kill_during_load(connection, agent, padded_manifest)
    restarted = await agent.start(connection)
    assert restarted.generation == loading.generation + 1
    loaded = await load_outcome(connection, loading.accelerator_id, loading.load_id)
    assert isinstance(loaded, s.ResidencyLoaded), loaded
    assert loaded.generation == restarted.generation
    reconciled = await next_event(
        connection,
        Aggregate.ACCELERATOR,
        loading.accelerator_id,
        lambda e: isinstance(e, s.ResidencyReconciled) and e.generation == restarted.generation,
    )
    assert reconciled.held == ()


async def test_a_load_that_kills_its_agent_on_every_delivery_ends_failed(
    connection: Connection, agents: Callable[..., AgentProcess], padded_manifest: list[dict[str, object]]
) -> None:
    agent = agents(f"node-{new_id()[:8]}", **{"--job-attempts": "1"})
    await agent.start(connection)
    loading = await kill_during_load(connection, agent, padded_manifest)
    await agent.start(connection)
    outcome = await load_outcome(connection, loading.accelerator_id, loading.load_id)
    assert isinstance(outcome, s.ResidencyLoadFailed), outcome
    assert outcome.code == codes.LEASE_TIMEOUT.code


async def test_an_invoke_in_flight_when_the_agent_dies_gets_no_reply_and_the_node_reconciles_cold(
    connection: Connection, agents: Callable[..., AgentProcess], minilm_manifest: list[dict[str, object]]
) -> None:
    agent = agents(f"node-{new_id()[:8]}")
    await agent.start(connection)
    job = load_job(agent.node, "dep-inflight", MINILM, minilm_manifest)
    await publish_job(connection, job)
    await next_event(
        connection,
        Aggregate.ACCELERATOR,
        job.accelerator_id,
        lambda e: isinstance(e, s.ResidencyLoaded) and e.load_id == job.load_id,
    )
    # A plain subscriber sees each request the agent's queue group gets: the moment to kill.
    seen = await connection.client.subscribe(subjects.invoke_subject(agent.node, "dep-inflight"))
    long_texts = [" ".join(f"word{i}-{j}" for j in range(200)) for i in range(256)]
    pending = asyncio.ensure_future(invoke(connection, agent.node, "dep-inflight", long_texts, timeout=5))
    await seen.next_msg(timeout=WAIT_S)
    await seen.unsubscribe()
    agent.kill()
    with pytest.raises(NatsTimeoutError):
        await pending
    with pytest.raises(NoRespondersError):
        await invoke(connection, agent.node, "dep-inflight", ["anyone?"])

    restarted = await agent.start(connection)
    reconciled = await next_event(
        connection,
        Aggregate.ACCELERATOR,
        job.accelerator_id,
        lambda e: isinstance(e, s.ResidencyReconciled) and e.generation == restarted.generation,
    )
    assert reconciled.held == ()
    assert restarted.residencies == []
    again = load_job(agent.node, "dep-inflight", MINILM, minilm_manifest)
    await publish_job(connection, again)
    await next_event(
        connection,
        Aggregate.ACCELERATOR,
        again.accelerator_id,
        lambda e: isinstance(e, s.ResidencyLoaded) and e.load_id == again.load_id,
    )
    embeddings_of(await invoke(connection, agent.node, "dep-inflight", ["served again"]))


async def test_an_agent_stopped_with_sigterm_answers_the_invokes_it_was_running_before_it_exits(
    connection: Connection, agents: Callable[..., AgentProcess], minilm_manifest: list[dict[str, object]]
) -> None:
    agent = agents(f"node-{new_id()[:8]}")
    await agent.start(connection)
    loaded = await load(connection, agent, "dep-stopped", minilm_manifest)
    # The worker is stopped, so the invokes are still in it when the agent is told to stop, however
    # fast or slow the machine (long batches as a clock ran past their deadline on a loaded one).
    with stopped(agent.workers()["dep-stopped"]):
        pending = await invokes_sent(connection, agent.node, "dep-stopped")
        # A job sent after the invokes (a drain of a model it does not hold) is handed to the agent's
        # job consumer after they were delivered: once it is recorded, the agent is running them.
        await drain(connection, agent, "dep-not-held", loaded.accelerator_id)
        await agent.terminating(connection)
        assert not any(reply.done() for reply in pending)
    assert await asyncio.to_thread(agent.stop) == 0  # it exits on its own, once they are answered
    assert all(len(output.embeddings) == 16 for output in await answered(pending))
