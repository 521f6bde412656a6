"""Replicas on two real agent processes: `min` copies resident on both nodes, one more under queue
pressure and back down when idle, and a node lost mid-load whose requests end on the other copy
or as a clear 503 — never at their deadline."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import msgspec

from eventstore.connection import Connection, connect
from eventstore.provision import provision
from eventstore.store import EventStore
from gateway.clients.service import ClientService
from gateway.scheduler import ResidencyState
from gateway.serving.replicas import copies_of
from gateway.state.live import LiveState
from streams import subjects
from streams.envelope import new_id
from streams.events import control as c
from streams.events import serving as s
from tests.integration.gateway.conftest import nats_of_its_own
from tests.support.agents import MINILM, AgentProcess
from tests.support.serving import InProcessGateway, events_until, probe, promote, register_artifacts

CLIENTS = 16
OPERATOR = "replicas-test-operator"


class TwoNodes(msgspec.Struct):
    connection: Connection
    gateway: InProcessGateway
    live: LiveState
    agents: dict[str, AgentProcess]  # by accelerator id
    deployment_id: str
    key: str

    def loaded_on(self) -> set[str]:
        copies = copies_of(self.live.accelerators.values(), self.deployment_id)
        return {state.accelerator_id for state, r in copies if r.state is ResidencyState.LOADED}


@contextlib.asynccontextmanager
async def two_nodes(root: Path, scratch: Path) -> AsyncIterator[TwoNodes]:
    """MiniLM probed on the first of two agents and promoted (one copy, on demand), a gateway; on a
    nats-server of its own (another test's nodes and deployment would share the catalogue)."""
    with nats_of_its_own(scratch) as server:
        async with _two_nodes(server.url, root, scratch) as stack:
            yield stack


@contextlib.asynccontextmanager
async def _two_nodes(nats_url: str, root: Path, scratch: Path) -> AsyncIterator[TwoNodes]:
    connection = await connect(nats_url, f"replicas-{new_id()[:6]}")
    await provision(connection.client)
    store = EventStore(connection)
    nodes = [f"node-{new_id()[:6]}" for _ in range(2)]
    agents = {f"{node}-cpu0": AgentProcess(nats_url, node, root, scratch) for node in nodes}
    gateway = InProcessGateway()
    try:
        for agent in agents.values():
            await agent.start(connection)
        artifacts = await register_artifacts(store, nodes[0], root, MINILM)
        deployment = await promote(store, artifacts, await probe(connection, nodes[0], artifacts, root))
        key = await ClientService(store).create(
            f"app-{new_id()[:6]}", ["rag.embedding@1"], requests_per_minute=100_000, max_concurrency=64
        )
        await gateway.start(nats_url)
        assert gateway.replica is not None
        gateway.replica.edge.operator_token = OPERATOR
        live = gateway.replica.edge.ctx.live
        assert await live.wait_for(lambda: all(live.node_live(n) for n in nodes), 30)
        yield TwoNodes(connection, gateway, live, agents, deployment, key.key)
    finally:
        await gateway.stop()
        for agent in agents.values():
            agent.stop()
        await connection.close()


async def admin(stack: TwoNodes, path: str, body: dict[str, object], status: int = 200) -> httpx.Response:
    headers = {"authorization": f"Bearer {OPERATOR}", "x-mf-operator": "tests"}
    async with httpx.AsyncClient(
        base_url=f"{stack.gateway.url}/admin/v1", headers=headers, timeout=60
    ) as http:
        response = await http.post(path, json=body)
        assert response.status_code == status, response.text
        return response


async def embed_concurrently(stack: TwoNodes, rounds: int) -> list[httpx.Response]:
    """CLIENTS clients, each sending `rounds` requests one after another."""
    headers = {"authorization": f"Bearer {stack.key}", "x-request-timeout-ms": "60000"}
    async with httpx.AsyncClient(base_url=stack.gateway.url, headers=headers, timeout=120) as http:

        async def client(index: int) -> list[httpx.Response]:
            return [
                await http.post("/v1/embeddings", json={"input": f"client {index} says {n}"})
                for n in range(rounds)
            ]

        answers = await asyncio.gather(*(client(i) for i in range(CLIENTS)))
    return [response for answer in answers for response in answer]


async def first_event(stack: TwoNodes, wanted: type[s.Event], **fields: object) -> s.Event:
    def matches(event: object) -> bool:
        return isinstance(event, wanted) and all(getattr(event, k) == v for k, v in fields.items())

    seen = await events_until(stack.connection, subjects.EVENTS_STREAM, matches, timeout=60)
    found = seen[-1]
    assert isinstance(found, wanted)
    return found


async def test_replicas_scale_up_under_queue_pressure_and_back_down_when_idle(
    minilm_root: Path, scratch: Path
) -> None:
    async with two_nodes(minilm_root, scratch) as stack:
        await admin(
            stack,
            "/scheduler/policy",
            {"settings": {"replica_scale_up_queue_depth": 2, "replica_idle_seconds": 2}},
        )
        refused = await admin(
            stack, f"/deployments/{stack.deployment_id}/replicas", {"min": 3, "max": 2}, 422
        )
        assert refused.json()["error"]["code"] == "INVALID_INPUT"
        assert (
            stack.live.catalog.deployments[stack.deployment_id].replicas == s.Replicas()
        )  # nothing recorded
        await admin(stack, f"/deployments/{stack.deployment_id}/replicas", {"min": 1, "max": 2})
        assert all(
            r.status_code == 200 for r in await embed_concurrently(stack, 1)
        )  # one copy, loaded by requests
        for _ in range(5):  # pressure until the upkeep asks for a second copy (bounded: a hung test fails)
            assert all(r.status_code == 200 for r in await embed_concurrently(stack, 4))
            if len(copies_of(stack.live.accelerators.values(), stack.deployment_id)) == 2:
                break
        scaled = await first_event(
            stack, s.ResidencyLoadRequested, deployment_id=stack.deployment_id, reason="replica_scale_up"
        )
        assert isinstance(scaled, s.ResidencyLoadRequested)
        await first_event(stack, s.ResidencyLoaded, load_id=scaled.load_id)
        # Idle: the copy beyond `min` goes, the other stays.
        released = await first_event(stack, s.EvictionPlanned, reason="replica_idle")
        assert isinstance(released, s.EvictionPlanned)
        assert released.victims == (stack.deployment_id,)
        await first_event(stack, s.ResidencyUnloaded, accelerator_id=released.accelerator_id)
        assert await stack.live.wait_for(lambda: len(stack.loaded_on()) == 1, 30)


async def test_min_copies_stay_on_both_nodes_and_a_lost_one_sends_its_requests_to_the_other(
    minilm_root: Path, scratch: Path
) -> None:
    async with two_nodes(minilm_root, scratch) as stack:
        await admin(stack, f"/deployments/{stack.deployment_id}/replicas", {"min": 2, "max": 2})
        for accelerator in stack.agents:  # the upkeep loads both copies, with no request asking
            await first_event(
                stack, s.ResidencyLoaded, accelerator_id=accelerator, deployment_id=stack.deployment_id
            )
        await first_event(
            stack, s.ResidencyLoadRequested, deployment_id=stack.deployment_id, reason="replica_min"
        )
        assert await stack.live.wait_for(lambda: stack.loaded_on() == set(stack.agents), 30)

        load = asyncio.create_task(embed_concurrently(stack, 6))
        victim = sorted(stack.agents)[1]

        def serving_on_both() -> bool:
            return all(stack.live.accelerators[a].leases for a in stack.agents)

        assert await stack.live.wait_for(serving_on_both, 60)
        stack.agents[victim].process.send_signal(signal.SIGKILL)  # type: ignore[union-attr]
        answers = await load
        codes = [(r.status_code, r.json()["error"]["code"] if r.status_code != 200 else "") for r in answers]
        assert all(status in (200, 503) for status, _ in codes), codes  # none waited to its deadline
        assert all(code != "REQUEST_TIMEOUT" for _, code in codes), codes
        await first_event(stack, c.NodeLost, node_id=stack.agents[victim].node)
        survivor = next(a for a in stack.agents if a != victim)
        assert await stack.live.wait_for(lambda: stack.loaded_on() == {survivor}, 30)  # its books ended
        assert sum(status == 200 for status, _ in codes) > len(codes) // 2  # the other copy served on
