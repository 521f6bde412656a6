"""The event log on a three-server cluster, the production shape of compose.yaml: streams kept on
every server, provisioning that waits for a new cluster's first election, and appends that go on,
each landing once, while a stream's leader is lost and another is elected."""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from eventstore import reading
from eventstore.connection import Connection, connect
from eventstore.errors import ConcurrencyConflict
from eventstore.provision import REPLICAS_ENV, provision
from eventstore.records import RecordedEvent
from eventstore.store import EventStore, ExpectedVersion
from eventstore.tls import nats_tls
from gateway.clients.limit_streams import provision_limits
from gateway.clients.limits import RequestLimiter
from gateway.clients.model import ClientPrincipal
from gateway.clients.permit import Permit
from modelforge.certs_cli import client_settings
from streams import subjects
from streams.codes import ServingError
from streams.envelope import new_id
from streams.events import serving as s
from streams.subjects import Aggregate
from tests.support.cluster import Cluster, running_cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("cluster")) as started:
        yield started


@pytest.fixture(scope="module")
async def cluster_connection(cluster: Cluster) -> AsyncIterator[Connection]:
    connection = await connect(cluster.urls, "cluster-tests")
    yield connection
    await connection.close()


async def _first_line(port: int, tls: ssl.SSLContext | None = None) -> bytes:
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=tls, server_hostname="127.0.0.1" if tls else None
    )
    try:
        return await reader.readline()
    finally:
        writer.close()


async def test_every_servers_clients_must_speak_tls_and_show_a_certificate(cluster: Cluster) -> None:
    for member in cluster.members:
        info = json.loads((await _first_line(member.port)).partition(b" ")[2])  # INFO, in the clear
        assert (info["tls_required"], info["tls_verify"]) == (True, True), member.name


async def test_every_servers_routes_speak_tls_under_the_clusters_ca(cluster: Cluster) -> None:
    for member in cluster.members:
        with pytest.raises(ssl.SSLCertVerificationError):  # a route's certificate: not the system's CAs'
            await _first_line(member.route_port, ssl.create_default_context())
        peer = nats_tls(client_settings(cluster.certs, member.name))  # as another server dials it
        assert (await _first_line(member.route_port, peer)).startswith(b"INFO "), member.name


async def test_provisioning_a_new_cluster_keeps_every_stream_on_the_configured_servers(
    cluster_connection: Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Right after the servers start: provisioning waits for the cluster's first election itself.
    monkeypatch.setenv(REPLICAS_ENV, "3")
    names = await provision(cluster_connection.client) + await provision_limits(cluster_connection.client)
    js = cluster_connection.client.jetstream()
    for name in names:
        info = await js.stream_info(name)
        assert info.config.num_replicas == 3, name
        assert info.cluster is not None
        assert len(info.cluster.replicas or []) == 2, name


async def test_provisioning_without_a_replica_setting_leaves_existing_streams_on_their_servers(
    cluster_connection: Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A CLI verb run where MODELFORGE_STREAM_REPLICAS is unset provisions too: it must not shrink
    # the production streams to one server.
    monkeypatch.delenv(REPLICAS_ENV, raising=False)
    names = await provision(cluster_connection.client) + await provision_limits(cluster_connection.client)
    js = cluster_connection.client.jetstream()
    for name in names:
        assert (await js.stream_info(name)).config.num_replicas == 3, name


async def test_gateway_replicas_provisioning_a_new_cluster_at_once_all_start(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    # compose.yaml starts both gateways together; each provisions every stream at start. Two
    # creates of one replicated stream racing could leave one unanswered (nats: timeout).
    with running_cluster(tmp_path_factory.mktemp("fresh-cluster")) as fresh:

        async def replica(name: str) -> list[str]:
            connection = await connect(fresh.urls, name)
            try:
                return await provision(connection.client, 3) + await provision_limits(connection.client, 3)
            finally:
                await connection.close()

        first, second = await asyncio.gather(replica("gateway-1"), replica("gateway-2"))
    assert first == second
    assert subjects.EVENTS_STREAM in first


async def test_appends_racing_on_one_aggregate_of_a_replicated_stream_lose_as_conflicts(
    cluster_connection: Connection,
) -> None:
    # A replicated stream refuses an append while another one on the same aggregate is still in
    # flight with err_code 10164 ("wrong last sequence", no sequence), not 10071: a lost race all the
    # same, which the writer must be told as a conflict (reload, decide again), never as a failure.
    await provision(cluster_connection.client, 3)
    store = EventStore(cluster_connection)
    accelerator = f"acc-{new_id()}"
    released = s.LeaseReleased(lease_id="lease", accelerator_id=accelerator, outcome="ok")
    version = await store.append(Aggregate.ACCELERATOR, accelerator, [released], ExpectedVersion.NO_STREAM)
    for _ in range(10):
        racing = [store.append(Aggregate.ACCELERATOR, accelerator, [released], version) for _ in range(6)]
        outcomes = await asyncio.gather(*racing, return_exceptions=True)
        won = [outcome for outcome in outcomes if isinstance(outcome, int)]
        lost = [outcome for outcome in outcomes if not isinstance(outcome, int)]
        assert len(won) == 1, outcomes
        assert all(isinstance(outcome, ConcurrencyConflict) for outcome in lost), lost
        version = won[0]
    records, _ = await store.load(Aggregate.ACCELERATOR, accelerator)
    assert len(records) == 11  # the first append and one winner a round: no loser was stored


async def test_replicas_racing_for_a_clients_concurrency_slot_on_a_cluster_refuse_as_queue_full(
    cluster: Cluster,
) -> None:
    # The slot stream is replicated too: a replica that loses the race for a slot is refused 10164
    # while the winner's publish is in flight. That is the slot taken (429 QUEUE_FULL), not a
    # backend failure (503 AUTH_BACKEND_UNAVAILABLE).
    first, second = await connect(cluster.urls, "gateway-1"), await connect(cluster.urls, "gateway-2")
    try:
        await provision_limits(first.client, 3)
        limiters = [RequestLimiter(first.client), RequestLimiter(second.client)]
        for round_ in range(5):
            who = ClientPrincipal(
                client_id=f"cl_race_{round_}_{new_id()}",
                name="race",
                scopes=frozenset({"rag.embedding@1"}),
                requests_per_minute=1000,
                max_concurrency=1,
                priority=0,
                project_id=None,
                credential_id="cred_race",
            )
            outcomes = await asyncio.gather(
                *(limiters[i % 2].acquire(who) for i in range(6)), return_exceptions=True
            )
            permits = [outcome for outcome in outcomes if isinstance(outcome, Permit)]
            refusals = [outcome for outcome in outcomes if not isinstance(outcome, Permit)]
            assert len(permits) == 1, outcomes
            assert all(isinstance(r, ServingError) and r.code == "QUEUE_FULL" for r in refusals), refusals
            await permits[0].release()
    finally:
        await first.close()
        await second.close()


async def test_appends_go_on_through_the_loss_of_the_stream_leader_each_landing_once(
    cluster: Cluster, cluster_connection: Connection
) -> None:
    store = EventStore(cluster_connection)
    accelerator, appended, total = f"acc-{new_id()}", asyncio.Event(), 300
    released = s.LeaseReleased(lease_id="lease", accelerator_id=accelerator, outcome="ok")

    async def append_one_by_one() -> list[int]:
        versions = [0]
        for _ in range(total):
            versions.append(await store.append(Aggregate.ACCELERATOR, accelerator, [released], versions[-1]))
            appended.set()
        return versions[1:]

    appending = asyncio.get_running_loop().create_task(append_one_by_one())
    await appended.wait()
    info = await cluster_connection.client.jetstream().stream_info(subjects.EVENTS_STREAM)
    assert info.cluster is not None
    assert info.cluster.leader is not None
    cluster.kill(info.cluster.leader)  # mid-way: the other two elect a new leader
    async with asyncio.timeout(60):
        versions = await appending
    records, version = await store.load(Aggregate.ACCELERATOR, accelerator)
    assert [r.sequence for r in records] == versions  # every append landed, once, in order
    assert version == versions[-1]
    after = await cluster_connection.client.jetstream().stream_info(subjects.EVENTS_STREAM)
    assert after.cluster is not None
    assert after.cluster.leader != info.cluster.leader


async def test_a_conflicts_check_of_whether_the_append_landed_waits_out_a_leader_election(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A refused append reads the aggregate back to see whether an earlier attempt of it landed. The
    # stream's leader lost just before that read made it fail with a TimeoutError after 5 s (a 503
    # in the fleet bench) instead of going on once another leader was elected.
    with running_cluster(tmp_path_factory.mktemp("election-cluster")) as own:
        connection = await connect(own.urls, "landing-check")
        try:
            await provision(connection.client, 3)
            store = EventStore(connection)
            accelerator = f"acc-{new_id()}"
            released = s.LeaseReleased(lease_id="lease", accelerator_id=accelerator, outcome="completed")
            await store.append(Aggregate.ACCELERATOR, accelerator, [released], ExpectedVersion.NO_STREAM)
            real_load, killed = reading.load, list[str]()

            async def load_after_losing_the_leader(*args: Any) -> tuple[list[RecordedEvent], int]:
                if not killed:  # the check's first read: the stream's leader goes just before it
                    info = await connection.client.jetstream().stream_info(subjects.EVENTS_STREAM)
                    assert info.cluster is not None
                    assert info.cluster.leader is not None
                    own.kill(info.cluster.leader)
                    killed.append(info.cluster.leader)
                return await real_load(*args)

            monkeypatch.setattr(reading, "load", load_after_losing_the_leader)
            with pytest.raises(ConcurrencyConflict):  # the read answered: not landed, a lost race
                await store.append(Aggregate.ACCELERATOR, accelerator, [released], ExpectedVersion.NO_STREAM)
            assert killed
        finally:
            await connection.close()
