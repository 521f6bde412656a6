"""`modelforge nodes credentials` gives a node a NATS user of its own (an nkey), recorded on its node
aggregate and rendered into the server's configuration; `nodes revoke` takes it away again: on the
reload the server closes that node's connection at once, and the other nodes serve on."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import Error as NatsError

from eventstore.connection import (
    NKEY_SEED_ENV,
    Connection,
    OrderedFlushClient,
    connect,
    inbox_prefix,
    public_key_of,
)
from eventstore.provision import provision
from eventstore.store import EventStore
from eventstore.tls import nats_tls
from gateway.identity.registry import recorded_identities
from modelforge.devstack.nats_server import NatsServer
from modelforge.devstack.processes import stop_pid
from streams import subjects
from streams.events.identity import NodeCredentialsIssued, NodeCredentialsRevoked
from streams.subjects import Aggregate
from tests.integration.deployment_nats import (
    certificates,
    config_file,
    deployment_server,
    restarted,
    tls_settings,
    url,
)
from tests.support.agents import AgentProcess

WAIT_S = 30.0  # a bound on waits that end at once when the server does its part
FLEET = ("edge-1", "edge-2")


def nodes_cli(server: NatsServer, seeds: Path, *args: str) -> str:
    """`modelforge nodes ...` as an operator runs it: as the provisioner, on the server's file."""
    result = subprocess.run(
        [Path(sys.executable).parent / "modelforge", "nodes", *args, "--config", str(config_file(server))]
        + ["--reload-pid", str(server.pid)]
        + (["--seeds", str(seeds)] if args[0] == "credentials" else []),
        env={**os.environ, "NATS_URL": url(server, "provisioner")},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


async def provisioned(server: NatsServer) -> None:
    conn = await connect(url(server, "provisioner"), "credentials-provisioner")
    await provision(conn.client)
    await conn.close()


@pytest.fixture(scope="module")
def fleet(scratch: Path) -> Iterator[tuple[NatsServer, Path]]:
    """A provisioned server whose node users are FLEET's, made by `nodes credentials` (it starts
    anew on the rendered file, so that they can sign in: reloading is what revocation tests)."""
    seeds = scratch / "fleet-seeds"
    with deployment_server(scratch) as first:
        asyncio.run(provisioned(first))
        for node in FLEET:
            nodes_cli(first, seeds, "credentials", node)
        server = restarted(first)
    with tls_settings(certificates(scratch)):
        try:
            asyncio.run(provisioned(server))  # (the streams kept in memory went with the first run)
            yield server, seeds
        finally:
            stop_pid(server.pid)  # (a failed provisioning too: no server left running)


@pytest.fixture
async def gateway(fleet: tuple[NatsServer, Path]) -> AsyncIterator[Connection]:
    conn = await connect(url(fleet[0], "gateway"), "credentials-gateway")
    yield conn
    await conn.close()


async def signed_in(server: NatsServer, seed: Path, closed: asyncio.Event | None = None) -> Client:
    """A node's connection that gives up once refused (an agent would keep trying, refused); its
    flush covers a subscription made before it, as an agent's does (`OrderedFlushClient`)."""
    client = OrderedFlushClient()

    async def on_closed() -> None:
        if closed is not None:
            closed.set()

    await client.connect(
        f"nats://127.0.0.1:{server.port}",
        nkeys_seed=str(seed),
        inbox_prefix=inbox_prefix(str(seed)),
        allow_reconnect=False,
        closed_cb=on_closed,
        tls=nats_tls(),
    )
    return client


def violations(server: NatsServer, seed: Path) -> list[str]:
    """The server's log lines of permission or authorization violations of that seed's user."""
    key = public_key_of(seed.read_bytes())
    return [line for line in Path(server.log).read_text().splitlines() if key in line and "Violation" in line]


async def answering(client: Client, node: str) -> None:
    async def answer(msg: Msg) -> None:
        await client.publish(msg.reply, node.encode())

    await client.subscribe(subjects.invoke_subject(node, "dep"), cb=answer)
    await client.flush()


async def test_credentials_record_the_nodes_public_key_and_leave_its_seed_to_its_owner_alone(
    fleet: tuple[NatsServer, Path], gateway: Connection
) -> None:
    _server, seeds = fleet
    seed = seeds / f"{FLEET[0]}.nk"
    records, _version = await EventStore(gateway).load(Aggregate.NODE, FLEET[0])
    issued = [r.event for r in records if isinstance(r.event, NodeCredentialsIssued)]
    assert issued == [NodeCredentialsIssued(node_id=FLEET[0], public_key=public_key_of(seed.read_bytes()))]
    assert seed.stat().st_mode & 0o777 == 0o600


async def test_a_node_signs_in_with_its_seed_and_answers_its_invokes(
    fleet: tuple[NatsServer, Path], gateway: Connection
) -> None:
    server, seeds = fleet
    node = await signed_in(server, seeds / f"{FLEET[1]}.nk")
    try:
        await answering(node, FLEET[1])
        reply = await gateway.client.request(subjects.invoke_subject(FLEET[1], "dep"), b"{}", timeout=WAIT_S)
    finally:
        await node.close()
    assert reply.data == FLEET[1].encode()


async def test_a_node_agent_signed_in_with_its_seed_registers_and_reports_and_is_refused_nothing(
    fleet: tuple[NatsServer, Path], gateway: Connection, scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, seeds = fleet
    node = FLEET[1]
    monkeypatch.setenv(NKEY_SEED_ENV, str(seeds / f"{node}.nk"))
    root = scratch / "fleet-artifacts"
    root.mkdir()
    agent = AgentProcess(f"nats://127.0.0.1:{server.port}", node, root, scratch)
    reports = await gateway.client.jetstream().subscribe(
        f"{subjects.TELEMETRY_PREFIX}.{node}.>", stream=subjects.TELEMETRY_STREAM, ordered_consumer=True
    )
    agent.launch()
    try:
        first = await reports.next_msg(timeout=WAIT_S)
    finally:
        assert agent.stop() == 0
        await reports.unsubscribe()
    records, _version = await EventStore(gateway).load(Aggregate.NODE, node)
    assert [type(r.event).__name__ for r in records[-2:]] == ["NodeRegistered", "WorkerStarted"]
    assert first.subject.startswith(f"{subjects.TELEMETRY_PREFIX}.{node}.{node}-")
    assert violations(server, seeds / f"{node}.nk") == []


async def test_a_revoked_node_is_refused_at_once_and_the_other_serves_on(
    fleet: tuple[NatsServer, Path], gateway: Connection
) -> None:
    server, seeds = fleet
    revoked, serving = FLEET
    closed = asyncio.Event()
    gone = await signed_in(server, seeds / f"{revoked}.nk", closed)
    other = await signed_in(server, seeds / f"{serving}.nk")
    try:
        await answering(other, serving)
        nodes_cli(server, seeds, "revoke", revoked, "--reason", "machine stolen")
        async with asyncio.timeout(WAIT_S):
            await closed.wait()  # the reload closed its connection
        with pytest.raises(NatsError, match=r"(?i)authorization"):
            await signed_in(server, seeds / f"{revoked}.nk")
        reply = await gateway.client.request(subjects.invoke_subject(serving, "dep"), b"{}", timeout=WAIT_S)
    finally:
        await other.close()
        await gone.close()
    assert reply.data == serving.encode()
    records, _version = await EventStore(gateway).load(Aggregate.NODE, revoked)
    assert isinstance(records[-1].event, NodeCredentialsRevoked)
    assert records[-1].event.reason == "machine stolen"
    provisioner = await connect(url(server, "provisioner"), "credentials-provisioner")
    try:
        assert set(await recorded_identities(provisioner.client)) == {serving}
    finally:
        await provisioner.close()
