"""The event log on a three-server cluster, the production shape of compose.yaml: streams kept on
every server, provisioning that waits for a new cluster's first election, and appends that go on,
each landing once, while a stream's leader is lost and another is elected."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest

from eventstore.connection import Connection, connect
from eventstore.provision import REPLICAS_ENV, provision
from eventstore.store import EventStore
from gateway.clients.limits import provision_limits
from streams import subjects
from streams.envelope import new_id
from streams.events import serving as s
from streams.subjects import Aggregate
from tests.support.cluster import Cluster, start_cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    started = start_cluster(tmp_path_factory.mktemp("cluster"))
    yield started
    started.stop()


@pytest.fixture(scope="module")
async def cluster_connection(cluster: Cluster) -> AsyncIterator[Connection]:
    connection = await connect(cluster.urls, "cluster-tests")
    yield connection
    await connection.close()


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
    fresh = start_cluster(tmp_path_factory.mktemp("fresh-cluster"))
    try:

        async def replica(name: str) -> list[str]:
            connection = await connect(fresh.urls, name)
            try:
                return await provision(connection.client, 3) + await provision_limits(connection.client, 3)
            finally:
                await connection.close()

        first, second = await asyncio.gather(replica("gateway-1"), replica("gateway-2"))
    finally:
        fresh.stop()
    assert first == second
    assert subjects.EVENTS_STREAM in first


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
    cluster.node(info.cluster.leader).process.kill()  # mid-way: the other two elect a new leader
    async with asyncio.timeout(60):
        versions = await appending
    records, version = await store.load(Aggregate.ACCELERATOR, accelerator)
    assert [r.sequence for r in records] == versions  # every append landed, once, in order
    assert version == versions[-1]
    after = await cluster_connection.client.jetstream().stream_info(subjects.EVENTS_STREAM)
    assert after.cluster is not None
    assert after.cluster.leader != info.cluster.leader
