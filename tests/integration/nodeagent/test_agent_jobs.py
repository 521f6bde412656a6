"""How the agent's job consumer treats deliveries: a job past its run attempts is recorded failed,
and that record is tried again when the event log refuses it; a job already finished here is not
run again when it is delivered again; an agent whose consumer was deleted makes it again."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable

from nats.aio.msg import Msg

from eventstore.connection import Connection
from nodeagent.agent.jobs import consumer_name
from streams import codes, subjects
from streams.envelope import new_id
from streams.events import serving as s
from streams.messages import UnloadJob
from streams.subjects import Aggregate
from tests.support.agents import (
    MINILM,
    WAIT_S,
    AgentProcess,
    aggregate_events,
    checked_health,
    load_job,
    load_outcome,
    next_event,
    publish_job,
)


@contextlib.asynccontextmanager
async def events_stream_full(connection: Connection) -> AsyncIterator[None]:
    """MF_EVENTS at a message limit it has reached: the server refuses every append (discard new)."""
    js = connection.client.jetstream()
    info = await js.stream_info(subjects.EVENTS_STREAM)
    assert info.config.max_msgs in (None, -1), "the events stream has no message limit of its own"
    await js.update_stream(dataclasses.replace(info.config, max_msgs=info.state.messages))
    try:
        yield
    finally:
        await js.update_stream(info.config)


async def take_delivery(connection: Connection, node: str) -> Msg:
    """Take the next job from the node's own consumer, as a generation that then died would."""
    js = connection.client.jetstream()
    taken = await js.pull_subscribe_bind(consumer_name(node), stream=subjects.WORK_STREAM)
    try:
        (msg,) = await taken.fetch(1, timeout=WAIT_S)
    finally:
        await taken.unsubscribe()
    return msg


async def test_a_job_past_its_attempts_is_recorded_failed_even_when_the_first_record_is_refused(
    connection: Connection, agents: Callable[..., AgentProcess], minilm_manifest: list[dict[str, object]]
) -> None:
    # A long lease: the delivery taken below stays with the test until it gives it back.
    agent = agents(f"node-{new_id()[:8]}", **{"--job-attempts": "1", "--job-ack-wait": str(WAIT_S)})
    await agent.start(connection)  # makes the node's consumer
    agent.stop()
    job = load_job(agent.node, "dep-out-of-attempts", MINILM, minilm_manifest)
    await publish_job(connection, job)
    first = await take_delivery(connection, agent.node)  # its one attempt, spent by a generation that died
    await agent.start(connection)
    acks = await connection.client.subscribe(f"$JS.ACK.{subjects.WORK_STREAM}.{consumer_name(agent.node)}.>")
    async with events_stream_full(connection):
        await first.nak()  # delivery 2 goes to the agent: past its attempts, it records the failure...
        while True:  # ...which the full stream refuses, so the agent gives the job back
            given_back = await acks.next_msg(timeout=WAIT_S)
            if given_back.subject != first.reply and given_back.data.startswith(b"-NAK"):
                break
    await acks.unsubscribe()

    outcome = await load_outcome(connection, job.accelerator_id, job.load_id)
    assert isinstance(outcome, s.ResidencyLoadFailed), outcome
    assert outcome.code == codes.LEASE_TIMEOUT.code
    events = await aggregate_events(connection, Aggregate.ACCELERATOR, job.accelerator_id)
    assert not [e for e in events if isinstance(e, s.ResidencyLoading) and e.load_id == job.load_id]


async def test_a_finished_job_delivered_again_is_not_run_again(
    connection: Connection, agents: Callable[..., AgentProcess], minilm_manifest: list[dict[str, object]]
) -> None:
    agent = agents(f"node-{new_id()[:8]}")
    await agent.start(connection)
    deployment = "dep-unloaded-once"
    first = load_job(agent.node, deployment, MINILM, minilm_manifest)
    await publish_job(connection, first)
    assert isinstance(await load_outcome(connection, first.accelerator_id, first.load_id), s.ResidencyLoaded)
    unload = UnloadJob(
        job_id=new_id(), node_id=agent.node, deployment_id=deployment, accelerator_id=first.accelerator_id
    )
    await publish_job(connection, unload)
    await next_event(
        connection,
        Aggregate.ACCELERATOR,
        unload.accelerator_id,
        lambda e: isinstance(e, s.ResidencyUnloaded) and e.deployment_id == deployment,
    )
    again = load_job(agent.node, deployment, MINILM, minilm_manifest)  # a new copy
    await publish_job(connection, again)
    assert isinstance(await load_outcome(connection, again.accelerator_id, again.load_id), s.ResidencyLoaded)

    await publish_job(connection, unload, msg_id=new_id())  # the unload again, as after a lost ack
    checked = await checked_health(connection, agent.node, deployment)  # jobs run in order

    assert checked.model_ok, checked
    events = await aggregate_events(connection, Aggregate.ACCELERATOR, unload.accelerator_id)
    assert (
        len([e for e in events if isinstance(e, s.ResidencyUnloading) and e.deployment_id == deployment]) == 1
    )


async def test_an_agent_whose_consumer_was_deleted_still_receives_its_jobs(
    connection: Connection, agents: Callable[..., AgentProcess]
) -> None:
    agent = agents(f"node-{new_id()[:8]}")
    await agent.start(connection)
    js = connection.client.jetstream()
    await js.delete_consumer(subjects.WORK_STREAM, consumer_name(agent.node))  # an operator, say

    checked = await checked_health(connection, agent.node, "dep-never-loaded")

    assert not checked.model_ok
