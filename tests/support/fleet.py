"""The production shape on one machine, for tests/integration/gateway/test_production_shape.py and
bench/fleet.py: a three-server NATS cluster (TLS on clients and routes, every stream on all three,
as `up --cluster` runs it), gateway processes, agent processes each on an empty artifact root (so
each fetches MiniLM from the artifact bucket into a cache of its own), MiniLM promoted and kept
resident on `replicas.min` nodes; and closed-loop clients that note how each request ended."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import msgspec
import pytest

from artifacts import build_manifest
from artifacts.bucket import put_set
from eventstore.connection import Connection, connect
from eventstore.provision import REPLICAS_ENV, provision
from eventstore.store import EventStore
from gateway.clients.service import ClientService
from streams import subjects
from streams.envelope import new_id
from streams.messages import AcceleratorTelemetry
from tests.support.agents import MINILM, WAIT_S, AgentProcess
from tests.support.cluster import Cluster, running_cluster
from tests.support.fleet_events import last_sequence, loaded_on
from tests.support.serving import GatewayProcess, probe, promote, register_artifacts

HEARTBEAT_S = 5.0  # the agents' telemetry interval: their default (nodeagent.agent.process)
OPERATOR = "fleet-operator-token"


class Answer(msgspec.Struct, frozen=True):
    """How one client request ended: its status, its error code and message ("" for a 200), and when
    (POSIX s)."""

    status: int
    code: str
    request_id: str
    started: float
    ended: float
    message: str = ""

    @property
    def waited(self) -> float:
        return self.ended - self.started


class Fleet(msgspec.Struct):
    cluster: Cluster
    connection: Connection
    agents: list[AgentProcess]
    gateways: list[GatewayProcess]
    deployment_id: str
    key: str

    @property
    def urls(self) -> list[str]:
        return [gateway.url for gateway in self.gateways]


class Load:
    """`clients` closed-loop clients, each sending one-text embedding requests one after another
    through the fleet's gateways (or `urls`) in turn, from entering the block until leaving it (the requests
    then in flight are answered first). Every answer is noted, in the order they came."""

    def __init__(
        self, fleet: Fleet, clients: int = 16, timeout_s: float = 60.0, urls: list[str] | None = None
    ) -> None:
        self.fleet, self.clients, self.timeout_s = fleet, clients, timeout_s
        self.urls = urls or fleet.urls
        self.answers: list[Answer] = []
        self._noted = asyncio.Condition()
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._http = httpx.AsyncClient(
            timeout=timeout_s + 30,
            limits=httpx.Limits(max_connections=clients * 2, max_keepalive_connections=clients * 2),
        )

    async def __aenter__(self) -> Load:
        self._tasks = [asyncio.create_task(self._client(i)) for i in range(self.clients)]
        return self

    async def __aexit__(self, *_: object) -> None:
        self._stop.set()
        try:
            await asyncio.gather(*self._tasks)
        finally:
            await self._http.aclose()

    async def answered(self, count: int) -> None:
        """Wait until `count` answers are in (since the block began)."""
        async with asyncio.timeout(WAIT_S * 2), self._noted:
            await self._noted.wait_for(lambda: len(self.answers) >= count)

    async def _client(self, index: int) -> None:
        headers = {
            "authorization": f"Bearer {self.fleet.key}",
            "x-request-timeout-ms": str(int(self.timeout_s * 1000)),
        }
        sent = index
        while not self._stop.is_set():
            url = self.urls[sent % len(self.urls)]
            started = time.time()
            try:
                response = await self._http.post(
                    f"{url}/v1/embeddings", json={"input": f"client {index} request {sent}"}, headers=headers
                )
                status, request_id = response.status_code, response.headers.get("x-request-id", "")
                error = {} if status == 200 else response.json()["error"]
                code, message = str(error.get("code", "")), str(error.get("message", ""))
            except httpx.TransportError as failure:  # a gateway that dropped the connection: noted
                status, request_id, code, message = 0, "", type(failure).__name__, str(failure)
            async with self._noted:
                self.answers.append(Answer(status, code, request_id, started, time.time(), message))
                self._noted.notify_all()
            sent += self.clients


async def set_replicas(fleet: Fleet, count: int) -> None:
    headers = {"authorization": f"Bearer {OPERATOR}", "x-mf-operator": "fleet"}
    async with httpx.AsyncClient(timeout=60) as http:
        response = await http.post(
            f"{fleet.urls[0]}/admin/v1/deployments/{fleet.deployment_id}/replicas",
            json={"min": count, "max": count},
            headers=headers,
        )
    assert response.status_code == 200, response.text


def _empty_root(home: Path, index: int) -> Path:
    root = home / f"agent-{index}-root"
    root.mkdir(parents=True, exist_ok=True)
    return root


@contextlib.asynccontextmanager
async def running_fleet(
    home: Path,
    minilm_root: Path,
    *,
    gateways: int = 2,
    agents: int = 2,
    pin: Callable[[int], set[int]] | None = None,
) -> AsyncIterator[Fleet]:
    """The fleet, MiniLM kept loaded on every agent (`replicas.min` = `agents`), while the block
    runs. `pin(i)`: the CPUs agent i (and the workers it starts) may run on."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv(REPLICAS_ENV, "3")  # provision makes R3 streams; the processes inherit it
        with running_cluster(home) as cluster:
            connection = await connect(cluster.urls, f"fleet-{new_id()[:6]}", first_connect_s=30)
            nodes = [
                AgentProcess(
                    cluster.urls,
                    f"node-{i}-{new_id()[:6]}",
                    _empty_root(home, i),
                    home,
                    **{"--telemetry-interval": str(HEARTBEAT_S)},
                )
                for i in range(agents)
            ]
            replicas = [GatewayProcess(cluster.urls, home, OPERATOR) for _ in range(gateways)]
            try:
                fleet = await _set_up(connection, cluster, nodes, replicas, minilm_root, pin)
                yield fleet
            finally:
                for replica in replicas:
                    replica.stop()
                for node in nodes:
                    node.stop()
                await connection.close()


async def _set_up(
    connection: Connection,
    cluster: Cluster,
    nodes: list[AgentProcess],
    replicas: list[GatewayProcess],
    minilm_root: Path,
    pin: Callable[[int], set[int]] | None,
) -> Fleet:
    """Streams and bucket provisioned, MiniLM stored in the bucket, the agents started (none holds
    its files), MiniLM probed on the first and promoted, a key, the gateways, and a copy on each."""
    await provision(connection.client)
    store = EventStore(connection)
    await put_set(connection.client, minilm_root / MINILM, build_manifest(minilm_root / MINILM))
    for index, node in enumerate(nodes):
        await node.start(connection)
        if pin is not None:  # before any worker starts: they inherit it
            os.sched_setaffinity(node.pid, pin(index))
    artifacts = await register_artifacts(store, nodes[0].node, minilm_root, MINILM)
    deployment_id = await promote(
        store, artifacts, await probe(connection, nodes[0].node, artifacts, minilm_root)
    )
    key = await ClientService(store).create(
        f"fleet-{new_id()[:6]}", ["rag.embedding@1"], requests_per_minute=10_000_000, max_concurrency=1024
    )
    for replica in replicas:
        await replica.start()
    fleet = Fleet(cluster, connection, nodes, replicas, deployment_id, key.key)
    await set_replicas(fleet, len(nodes))
    async with httpx.AsyncClient(timeout=WAIT_S) as http:  # one copy on demand (what min = 1 keeps)
        warm = await http.post(
            f"{fleet.urls[0]}/v1/embeddings",
            json={"input": "warm"},
            headers={"authorization": f"Bearer {key.key}"},
        )
    assert warm.status_code == 200, warm.text
    await loaded_on(connection, deployment_id, len(nodes))
    return fleet


def accelerator_of(agent: AgentProcess) -> str:
    return f"{agent.node}-cpu0"


async def sampled_since(fleet: Fleet, moment: float) -> None:
    """Wait until every agent has published a telemetry sample observed at or after `moment`."""
    waiting = {agent.node for agent in fleet.agents if agent.running}
    sub = await fleet.connection.client.subscribe(f"{subjects.TELEMETRY_PREFIX}.>")
    try:
        async with asyncio.timeout(WAIT_S):
            while waiting:
                sample = msgspec.json.decode(
                    (await sub.next_msg(timeout=WAIT_S)).data, type=AcceleratorTelemetry
                )
                if sample.observed_at_unix_ms >= moment * 1000:
                    waiting.discard(sample.node_id)
    finally:
        await sub.unsubscribe()


async def every_copy_back(fleet: Fleet) -> None:
    """Each agent a test killed started again, with its copy loaded once more (`replicas.min`)."""
    since = await last_sequence(fleet.connection, subjects.EVENTS_STREAM) + 1
    dead = [agent for agent in fleet.agents if not agent.running]
    for agent in dead:
        await agent.start(fleet.connection)
    if dead:
        await loaded_on(fleet.connection, fleet.deployment_id, len(dead), since)
