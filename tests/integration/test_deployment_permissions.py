"""Each role's user in deploy/nats/nats.conf (compose.yaml runs each service as its role) may do
that role's work: the provisioner makes the streams, the gateway starts on them, appends, dispatches
and keeps client limits, a node's agent (its own nkey user) takes its jobs, answers its invokes and
the gateway's liveness question, and publishes its telemetry, the
projector reads the streams (as the projector and `replay` do), and `audit tail` follows the events
as the audit user or the projector's. The server runs that file itself (tests/integration/
deployment_nats.py); test_deployment_refusals.py tries what each role must not do.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from pathlib import Path
from typing import Any, cast

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import NoRespondersError

from artifacts import build_manifest
from artifacts.bucket import get_file, open_bucket, put_set
from eventstore import audit
from eventstore.backup import BACKED_UP, backup
from eventstore.connection import Connection, connect
from eventstore.provision import provision
from eventstore.records import RecordedEvent
from eventstore.store import EventStore, ExpectedVersion
from eventstore.subscription import subscribe
from gateway.admin.reads import requests_from_log
from gateway.clients.limit_streams import provision_limits
from gateway.clients.limits import RequestLimiter
from gateway.clients.model import ClientPrincipal
from gateway.contracts import register_contracts
from gateway.state.live import LiveState
from gateway.state.snapshots import SnapshotWriter, start_live
from modelforge.devstack.nats_server import NatsServer
from nodeagent.agent.hardware import detect
from nodeagent.agent.jobs import JobConsumer
from nodeagent.agent.liveness import answer_liveness
from nodeagent.agent.metrics import AgentMetrics
from nodeagent.agent.operations import Operations
from nodeagent.agent.registration import start_generation
from nodeagent.agent.telemetry import TelemetryPublisher
from projections import source
from projections.scenario import control_plane, traffic
from streams import configs, subjects
from streams.codes import ServingError
from streams.contracts import CONTRACTS
from streams.envelope import Actor, ActorKind
from streams.events.control import ProjectRegistered
from streams.subjects import Aggregate
from tests.integration.deployment_nats import NODES, connect_node, url
from tests.integration.projections.helpers import publish

WAIT_S = 30.0  # a bound on a wait that succeeds at once when permitted, not a measured time


@pytest.fixture(scope="module")
async def gateway(deployment_nats: NatsServer, provisioner: Connection) -> AsyncIterator[Connection]:
    conn = await connect(url(deployment_nats, "gateway"), "permissions-gateway")
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


@pytest.mark.parametrize("ack_waits", [(30.0,), (30.0, 60.0)], ids=["made", "remade-on-new-settings"])
async def test_a_node_user_takes_the_jobs_the_gateway_user_dispatches_through_its_consumer(
    deployment_nats: NatsServer, gateway: Connection, ack_waits: tuple[float, ...]
) -> None:
    # A consumer whose settings changed is deleted and made anew (nodeagent/agent/jobs.py).
    node = NODES[0]
    await gateway.client.jetstream().publish(subjects.job_subject(node, "dep", "load"), b"{}")
    agent = await connect_node(deployment_nats, node)
    try:
        for ack_wait_s in ack_waits:
            jobs = await JobConsumer(agent.client, node, cast(Operations, None), ack_wait_s=ack_wait_s).bind()
        [job] = await jobs.fetch(1, timeout=WAIT_S)
        await job.ack_sync()
    finally:
        await agent.close()
    assert job.subject == subjects.job_subject(node, "dep", "load")


async def test_a_node_user_answers_the_invokes_the_gateway_user_sends_it(
    deployment_nats: NatsServer, gateway: Connection
) -> None:
    subject = subjects.invoke_subject(NODES[0], "dep")
    agent = await connect_node(deployment_nats, NODES[0])
    try:

        async def answer(msg: Msg) -> None:
            await agent.client.publish(msg.reply, b"answered")

        await agent.client.subscribe(subject, cb=answer)
        await agent.client.flush()
        reply = await gateway.client.request(subject, b"{}", timeout=WAIT_S)
    finally:
        await agent.close()
    assert reply.data == b"answered"


async def test_a_node_user_answers_the_liveness_question_until_its_connection_closes(
    deployment_nats: NatsServer, gateway: Connection
) -> None:
    agent = await connect_node(deployment_nats, NODES[0])
    try:
        await answer_liveness(agent.client, NODES[0])
        answered = await gateway.client.request(subjects.alive_subject(NODES[0]), b"", timeout=WAIT_S)
    finally:
        await agent.close()
    assert answered.data == b""
    with pytest.raises(NoRespondersError):  # its subscription went with its connection
        await gateway.client.request(subjects.alive_subject(NODES[0]), b"", timeout=WAIT_S)


async def test_a_read_whose_first_pulls_find_no_consumer_yet_pulls_again(
    deployment_nats: NatsServer, published: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    # On a cluster the consumer's creation is answered before its interest reaches every server:
    # the first pulls get 503 No Responders. Here its creation is answered before it is made, and
    # it is made once a pull found no one, on a connection of its own (a RawNats is read by one
    # coroutine at a time, as in production: a second one reading it would take the other's replies).
    projector = url(deployment_nats, "projector")
    request, read_messages = source.RawNats.request, source.RawNats.read_messages
    unmade: list[tuple[str, bytes]] = []

    async def answered_early(self: source.RawNats, subject: str, payload: bytes, timeout: float = 5.0) -> Any:
        if not subject.startswith("$JS.API.CONSUMER.CREATE."):
            return await request(self, subject, payload, timeout)
        unmade.append((subject, payload))
        return {"type": "io.nats.jetstream.api.v1.consumer_create_response"}

    async def made_once_a_pull_found_no_one(self: source.RawNats, timeout: float) -> Any:
        messages = await read_messages(self, timeout)
        if unmade and any(not reply and headers[9:12] == b"503" for _s, reply, headers, _d in messages):
            subject, payload = unmade.pop()
            other = await source.RawNats.open(projector)
            try:
                assert "error" not in await request(other, subject, payload)
            finally:
                await other.close()
        return messages

    monkeypatch.setattr(source.RawNats, "request", answered_early)
    monkeypatch.setattr(source.RawNats, "read_messages", made_once_a_pull_found_no_one)
    last = published[subjects.EVENTS_STREAM]
    deliveries = [
        d async for chunk in source.read(subjects.EVENTS_STREAM, 1, last, urls=projector) for d in chunk
    ]
    assert unmade == []  # made after a refused pull, not before any
    assert [d.seq for d in deliveries] == list(range(1, last + 1))


async def test_the_provisioner_user_creates_and_updates_every_stream(
    provisioner: Connection, gateway: Connection
) -> None:
    made = await provision(provisioner.client) + await provision_limits(provisioner.client)
    every = [
        *subjects.PROJECTED_STREAMS,
        subjects.WORK_STREAM,
        subjects.TELEMETRY_STREAM,
        subjects.ARTIFACTS_STREAM,
        subjects.SNAPSHOTS_STREAM,
    ]
    assert set(made) == {*every, subjects.LIMITS_RATE_STREAM, subjects.LIMITS_CONCURRENCY_STREAM}
    js = gateway.client.jetstream()
    await provision(provisioner.client, request_max_age_days=7.0)
    assert (await js.stream_info(subjects.REQUESTS_STREAM)).config.max_age == 7 * configs.DAY_S
    await provision(provisioner.client)
    assert (await js.stream_info(subjects.REQUESTS_STREAM)).config.max_age == 30 * configs.DAY_S


async def test_the_provisioner_user_registers_the_contracts_and_a_gateway_finds_them_registered(
    provisioner: Connection, gateway: Connection
) -> None:
    assert sorted(await register_contracts(EventStore(provisioner))) == sorted(CONTRACTS)
    assert await register_contracts(EventStore(gateway)) == []


async def test_the_provisioner_user_backs_up_the_event_streams(
    provisioner: Connection, scratch: Path
) -> None:
    file = scratch / f"perm-backup-{uuid.uuid4().hex[:6]}.tar"
    manifest = await backup(provisioner.client, file, lambda _: None)
    assert [entry.stream for entry in manifest.streams] == list(BACKED_UP)


async def test_the_gateway_user_finds_the_provisioned_streams_as_it_needs_them(gateway: Connection) -> None:
    # What a gateway does at start (and `modelforge clients`): nothing to change, so nothing refused.
    assert await provision(gateway.client) + await provision_limits(gateway.client)


def _principal(max_concurrency: int) -> ClientPrincipal:
    client_id = f"perm-client-{uuid.uuid4().hex[:6]}"
    return ClientPrincipal(client_id, client_id, frozenset(), 100, max_concurrency, 0, None, "cred")


async def test_the_gateway_user_stores_a_snapshot_of_its_live_view_and_starts_from_it(
    gateway: Connection,
) -> None:
    view, resumed = LiveState(), LiveState()
    try:
        await view.start(gateway.client)
        assert await SnapshotWriter(gateway.client, view, every=1).write()
        assert await start_live(gateway.client, resumed) == view.applied
    finally:
        await view.stop()
        await resumed.stop()


async def test_the_gateway_user_takes_lists_and_releases_concurrency_slots(
    deployment_nats: NatsServer, gateway: Connection
) -> None:
    principal = _principal(max_concurrency=1)
    other = await connect(url(deployment_nats, "gateway"), "permissions-gateway-2")
    try:
        held = await RequestLimiter(gateway.client).acquire(principal)
        with pytest.raises(ServingError) as refused:  # found taken, then listed as occupied
            await RequestLimiter(other.client).acquire(principal)
        await held.release()  # deletes the slot's message
        again = await RequestLimiter(other.client).acquire(principal)
        await again.release()
    finally:
        await other.close()
    assert refused.value.code == "QUEUE_FULL"


async def test_the_gateway_user_waits_for_a_deployments_slot_on_the_notice_another_gateway_sends(
    deployment_nats: NatsServer, gateway: Connection
) -> None:
    run = subjects.deployment_slots(f"perm-dep-{uuid.uuid4().hex[:6]}", "run")
    other = await connect(url(deployment_nats, "gateway"), "permissions-gateway-3")
    try:
        held = await RequestLimiter(gateway.client).take_slot(run, 1)
        assert held is not None
        assert await RequestLimiter(other.client).take_slot(run, 1) is None
        freed = await other.client.subscribe(subjects.slot_freed_subject(run))
        await held.release()  # deletes the slot's message, then tells those waiting
        await freed.next_msg(timeout=10)
        again = await RequestLimiter(other.client).take_slot(run, 1)
        assert again is not None
        await again.release()
        await freed.unsubscribe()
    finally:
        await other.close()


async def test_the_gateway_user_reads_its_own_latest_appends_from_the_leader_and_the_request_log(
    gateway: Connection, published: dict[str, int]
) -> None:
    store = EventStore(gateway)
    first, second = (f"perm-{uuid.uuid4().hex[:6]}" for _ in range(2))
    appended = await store.append(
        Aggregate.PROJECT, first, [ProjectRegistered(first, first)], ExpectedVersion.NO_STREAM
    )
    await store.append(
        Aggregate.PROJECT, second, [ProjectRegistered(second, second)], ExpectedVersion.NO_STREAM
    )
    # The store's last append is past `first`'s: the load asks the leader what a replica lacked.
    records, version = await store.load(Aggregate.PROJECT, first)
    assert ([r.sequence for r in records], version) == ([appended], appended)
    assert await requests_from_log(gateway.client, 1_000, None)


async def test_a_node_user_starts_a_generation_and_publishes_its_telemetry(
    deployment_nats: NatsServer, gateway: Connection
) -> None:
    hardware = detect(NODES[1])
    agent = await connect_node(deployment_nats, NODES[1])
    snapshots: asyncio.Queue[bytes] = asyncio.Queue()

    async def heard(msg: Msg) -> None:
        await snapshots.put(msg.data)

    # The gateway user hears the node's metrics snapshot, which goes with its telemetry.
    heard_by_gateway = await gateway.client.subscribe(f"{subjects.AGENT_METRICS_PREFIX}.*", cb=heard)
    await gateway.client.flush()
    try:
        store, actor = EventStore(agent), Actor(ActorKind.AGENT, hardware.node_id)
        # The second start loads the node after this store's own appends: a leader read too.
        generations = [await start_generation(store, hardware, ("onnx",), actor) for _ in range(2)]
        await TelemetryPublisher(
            agent.client, hardware, generations[-1], lambda _: [], lambda _: [], 1.0,
            metrics_snapshot=AgentMetrics().snapshot,
        ).publish_all()  # fmt: skip
        snapshot = await asyncio.wait_for(snapshots.get(), 30)
    finally:
        await heard_by_gateway.unsubscribe()
        await agent.close()
    assert b"modelforge_agent_" in snapshot
    assert generations == [1, 2]
    telemetry = subjects.telemetry_subject(hardware.node_id, hardware.accelerators[0].id)
    info = await gateway.client.jetstream().stream_info(subjects.TELEMETRY_STREAM, subjects_filter=telemetry)
    assert info.state.subjects == {telemetry: 1}
    # The gateway reads a node's last sample before it declares the node lost (node_silence).
    last = await gateway.client.jetstream().get_last_msg(subjects.TELEMETRY_STREAM, telemetry)
    assert last.subject == telemetry


async def test_the_gateway_user_stores_an_artifact_set_and_the_agent_user_fetches_it(
    deployment_nats: NatsServer, gateway: Connection, tmp_path: Path
) -> None:
    # `artifacts import` runs in the gateway; an agent fetches the files into its cache.
    source = tmp_path / "set"
    source.mkdir()
    (source / "config.json").write_text(f'{{"run": "{uuid.uuid4().hex}"}}')
    manifest = build_manifest(source)
    assert await put_set(gateway.client, source, manifest) == manifest.total_bytes
    assert await put_set(gateway.client, source, manifest) == 0  # stored once, by sha256
    agent = await connect_node(deployment_nats, NODES[0])
    try:
        [entry] = manifest.files
        await get_file(await open_bucket(agent.client), entry, tmp_path / "fetched.json")
    finally:
        await agent.close()
    assert (tmp_path / "fetched.json").read_bytes() == (source / "config.json").read_bytes()
