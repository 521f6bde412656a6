"""Each role's user in deploy/nats/nats.conf (compose.yaml runs each service as its role) may do
that role's work: the gateway appends and dispatches, the agent takes its jobs and answers invokes,
the projector reads the streams (as the projector and `replay` do), and `audit tail` follows the
events as the audit user or the projector's.

The server here runs that file itself. Only what ties it to the compose network is left out (the
cluster block, whose routes name the other containers, the monitoring port, and the jetstream
block with the container's store folder); the port and JetStream's store come from the command line, the passwords and server name from the environment, as in
compose.yaml. The accounts, users and permissions are the file's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from eventstore import audit
from eventstore.connection import Connection, connect
from eventstore.provision import provision
from eventstore.records import RecordedEvent
from eventstore.store import EventStore
from eventstore.subscription import subscribe
from modelforge.devstack.nats_server import NatsServer, start_nats
from modelforge.devstack.processes import stop_pid
from nodeagent.agent.jobs import consumer_config, consumer_name
from projections import source
from projections.scenario import control_plane, traffic
from streams import subjects
from tests.integration.projections.helpers import publish

CONFIG = Path(__file__).resolve().parents[2] / "deploy/nats/nats.conf"
PASSWORDS = {role: f"{role}-secret" for role in ("gateway", "agent", "projector", "audit", "sys")}
WAIT_S = 30.0  # a bound on a wait that succeeds at once when permitted, not a measured time


def _without_block(text: str, name: str) -> str:
    """`text` less the top-level `name { ... }` block (braces matched)."""
    found = re.search(rf"^{name}\s*\{{", text, re.MULTILINE)
    assert found is not None, f"{CONFIG} has no {name} block"
    depth = 0
    for end in range(found.end() - 1, len(text)):
        depth += {"{": 1, "}": -1}.get(text[end], 0)
        if depth == 0:
            return text[: found.start()] + text[end + 1 :]
    raise AssertionError(f"{CONFIG}: the {name} block is not closed")


def single_server_config() -> str:
    text = _without_block(_without_block(CONFIG.read_text(), "cluster"), "jetstream")
    return re.sub(r"^http:.*$", "", text, flags=re.MULTILINE)


@pytest.fixture(scope="module")
def deployment_nats(scratch: Path) -> Iterator[NatsServer]:
    env = {f"{role.upper()}_PASSWORD": password for role, password in PASSWORDS.items()}
    server = start_nats(
        scratch / f"nats-deploy-{uuid.uuid4().hex[:8]}",
        detach=False,
        config_text=single_server_config(),
        env={**env, "SERVER_NAME": "nats-permissions"},
    )
    yield server
    stop_pid(server.pid)


def url(server: NatsServer, role: str) -> str:
    return f"nats://{role}:{PASSWORDS[role]}@127.0.0.1:{server.port}"


@pytest.fixture(scope="module")
async def gateway(deployment_nats: NatsServer) -> AsyncIterator[Connection]:
    conn = await connect(url(deployment_nats, "gateway"), "permissions-gateway")
    await provision(conn.client)  # the gateway provisions the streams at start
    yield conn
    await conn.close()


@pytest.fixture(scope="module")
async def published(gateway: Connection) -> dict[str, int]:
    """The last sequence per stream after the gateway appended a control plane and some traffic."""
    run = f"perm{uuid.uuid4().hex[:6]}"
    return await publish(EventStore(gateway), [*control_plane(run), *traffic(run, 5)])


async def followed_to(
    server: NatsServer, role: str, records: Callable[[Client], AsyncGenerator[RecordedEvent, None]], last: int
) -> int:
    """The sequence of the first record at or past `last` that `records` yields to `role`."""
    reader = await connect(url(server, role), f"permissions-{role}")
    try:
        async with asyncio.timeout(WAIT_S), contextlib.aclosing(records(reader.client)) as followed:
            async for record in followed:
                if record.sequence >= last:
                    return record.sequence
    finally:
        await reader.close()
    return 0


@pytest.mark.parametrize("role", ["audit", "projector"])
async def test_audit_tail_follows_the_events_as_the_audit_and_projector_users(
    deployment_nats: NatsServer, published: dict[str, int], role: str
) -> None:
    last = published[subjects.EVENTS_STREAM]
    assert await followed_to(deployment_nats, role, audit.tail, last) == last


async def test_the_audit_user_follows_the_request_history(
    deployment_nats: NatsServer, published: dict[str, int]
) -> None:
    last = published[subjects.REQUESTS_STREAM]

    def requests(client: Client) -> AsyncGenerator[RecordedEvent, None]:
        return subscribe(client, stream=subjects.REQUESTS_STREAM)

    assert await followed_to(deployment_nats, "audit", requests, last) == last


@pytest.mark.parametrize("stream", [subjects.EVENTS_STREAM, subjects.REQUESTS_STREAM])
async def test_the_projector_user_reads_a_stream_and_its_store_times_as_replay_does(
    deployment_nats: NatsServer, published: dict[str, int], stream: str
) -> None:
    projector = url(deployment_nats, "projector")
    _first, last = await source.last_sequence(stream, projector)
    assert last == published[stream]
    deliveries = [d async for chunk in source.read(stream, 1, last, urls=projector) for d in chunk]
    assert [d.seq for d in deliveries] == list(range(1, last + 1))
    # what `replay --until-seq` asks to cut MF_REQUESTS at the time an event was stored
    assert await source.stored_ns(stream, last, projector) == deliveries[-1].stored_ns


async def test_the_agent_user_takes_the_jobs_the_gateway_user_dispatches(
    deployment_nats: NatsServer, gateway: Connection
) -> None:
    node = f"node-{uuid.uuid4().hex[:6]}"
    await gateway.client.jetstream().publish(subjects.job_subject(node, "dep", "load"), b"{}")
    agent = await connect(url(deployment_nats, "agent"), "permissions-agent")
    try:
        js = agent.client.jetstream()
        await js.add_consumer(subjects.WORK_STREAM, consumer_config(node, 30.0, 4))
        jobs = await js.pull_subscribe_bind(consumer_name(node), stream=subjects.WORK_STREAM)
        [job] = await jobs.fetch(1, timeout=WAIT_S)
        await job.ack_sync()
    finally:
        await agent.close()
    assert job.subject == subjects.job_subject(node, "dep", "load")


async def test_the_agent_user_answers_the_invokes_the_gateway_user_sends(
    deployment_nats: NatsServer, gateway: Connection
) -> None:
    subject = subjects.invoke_subject(f"node-{uuid.uuid4().hex[:6]}", "dep")
    agent = await connect(url(deployment_nats, "agent"), "permissions-agent")
    try:

        async def answer(msg: Msg) -> None:
            await agent.client.publish(msg.reply, b"answered")

        await agent.client.subscribe(subject, cb=answer)
        await agent.client.flush()
        reply = await gateway.client.request(subject, b"{}", timeout=WAIT_S)
    finally:
        await agent.close()
    assert reply.data == b"answered"


async def test_a_read_whose_first_pulls_find_no_consumer_yet_pulls_again(
    deployment_nats: NatsServer, published: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    # On a cluster the consumer's creation is answered before its interest reaches every server:
    # the first pulls get 503 No Responders. Here its creation is answered before it is made.
    create = source.RawNats.request

    async def answered_early(self: source.RawNats, subject: str, payload: bytes, timeout: float = 5.0) -> Any:
        if not subject.startswith("$JS.API.CONSUMER.CREATE."):
            return await create(self, subject, payload, timeout)

        async def later() -> None:
            await asyncio.sleep(0.3)
            await create(self, subject, payload, timeout)

        pending.append(asyncio.create_task(later()))
        return {"type": "io.nats.jetstream.api.v1.consumer_create_response"}

    pending: list[asyncio.Task[None]] = []
    monkeypatch.setattr(source.RawNats, "request", answered_early)
    projector = url(deployment_nats, "projector")
    last = published[subjects.EVENTS_STREAM]
    deliveries = [
        d async for chunk in source.read(subjects.EVENTS_STREAM, 1, last, urls=projector) for d in chunk
    ]
    assert [d.seq for d in deliveries] == list(range(1, last + 1))
