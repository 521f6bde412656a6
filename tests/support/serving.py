"""Gateway test support: a MiniLM deployment promoted from a real probe, and gateway replicas
(in-process or as `modelforge gateway` subprocesses) against a test's own nats-server."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from artifacts import build_manifest
from artifacts.registration import content_id, registration
from eventstore.connection import Connection
from eventstore.store import EventStore, ExpectedVersion
from eventstore.subscription import subscribe
from gateway.http.server import server_config
from gateway.process import GatewayReplica, start_replica
from gateway.promotion.envelope import envelope_from_probe
from gateway.serving.refusal_log import flush_refusals
from modelforge.devstack.processes import free_port, wait_for_port
from streams import codec
from streams.envelope import new_id
from streams.events import control as c
from streams.events import serving as s
from streams.messages import ProbeJob
from streams.subjects import Aggregate
from tests.support.agents import WAIT_S, manifest_records, next_event, publish_job

EMBEDDING = "rag.embedding@1"


async def register_artifacts(
    store: EventStore, node_id: str, root: Path, folder: str, capability: str = EMBEDDING
) -> c.ArtifactSetRegistered:
    manifest = build_manifest(root / folder)
    event = registration(
        manifest,
        set_id=content_id(manifest, folder),
        name=folder,
        capability=capability,
        node_id=node_id,
        folder=folder,
        source="tests",
    )
    await store.append(Aggregate.ARTIFACT_SET, event.artifact_set_id, [event], ExpectedVersion.ANY)
    return event


async def probe(
    connection: Connection, node_id: str, artifacts: c.ArtifactSetRegistered, root: Path
) -> c.ProbeCompleted:
    candidate = new_id()
    job = ProbeJob(
        job_id=new_id(),
        node_id=node_id,
        deployment_id=f"probe-{candidate[:8]}",
        accelerator_id=f"{node_id}-cpu0",
        probe_id=new_id(),
        candidate_id=candidate,
        artifact_set_id=artifacts.artifact_set_id,
        capability=artifacts.capability,
        artifact_root=artifacts.root,
        manifest=manifest_records(root / artifacts.root),
    )
    await publish_job(connection, job)
    result = await next_event(
        connection, Aggregate.CANDIDATE, candidate, lambda e: isinstance(e, c.ProbeCompleted | c.ProbeFailed)
    )
    assert isinstance(result, c.ProbeCompleted), result
    return result


async def promote(
    store: EventStore,
    artifacts: c.ArtifactSetRegistered,
    measured: c.ProbeCompleted,
    *,
    route: str = "",
    model_name: str = "all-MiniLM-L6-v2",
    truncatable_dimensions: tuple[int, ...] = (),
    space: s.EmbeddingSpace | None = None,
    caps: s.DeploymentCaps | None = None,
) -> str:
    """A stable deployment, or with `route` an active experiment reached by that model name.
    A MiniLM set gets MiniLM's embedding space (with `truncatable_dimensions`), others `space`.
    `caps`: other than a deployment's own (an experiment runs one request at a time)."""
    deployment_id = f"dep-{new_id()[:10]}"
    envelope = envelope_from_probe(measured)
    if artifacts.capability == EMBEDDING:
        space = s.EmbeddingSpace(
            space_id="minilm-l6-v2",
            dimension=384,
            normalized=True,
            input_semantics="symmetric",
            truncatable_dimensions=truncatable_dimensions,
        )
    events: list[codec.Event] = (
        [
            s.ExperimentCreated(
                deployment_id=deployment_id,
                capability=artifacts.capability,
                candidate_id=measured.candidate_id,
                artifact_set_id=artifacts.artifact_set_id,
                model_name=route,
                route=route,
                envelope=envelope,
                embedding_space=space,
                probe_id=measured.probe_id,
            ),
            s.ExperimentActivated(deployment_id=deployment_id),
        ]
        if route
        else [
            s.DeploymentPromoted(
                deployment_id=deployment_id,
                capability=artifacts.capability,
                candidate_id=measured.candidate_id,
                approval_id="test",
                artifact_set_id=artifacts.artifact_set_id,
                model_name=model_name,
                channel="stable",
                envelope=envelope,
                embedding_space=space,
                probe_id=measured.probe_id,
            )
        ]
    )
    if caps is not None:  # before the activation: a test that waits for its route finds its caps
        events.insert(1, s.DeploymentCapsChanged(deployment_id=deployment_id, caps=caps))
    await store.append(Aggregate.DEPLOYMENT, deployment_id, events, ExpectedVersion.NO_STREAM)
    return deployment_id


class InProcessGateway:
    """One replica in this event loop, served by uvicorn on a free port."""

    def __init__(self) -> None:
        self.replica: GatewayReplica | None = None
        self.server: uvicorn.Server | None = None
        self.task: asyncio.Task[None] | None = None
        self.url = ""

    async def start(self, nats_url: str) -> str:
        self.replica = await start_replica(f"gw-{new_id()[:8]}", nats_url)
        # A socket bound and listening before uvicorn starts: connections queue until it accepts.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        sock.listen(512)
        port = sock.getsockname()[1]
        self.server = uvicorn.Server(server_config(self.replica.app, log_level="warning"))
        self.task = asyncio.create_task(self.server.serve(sockets=[sock]))
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    async def settled(self) -> None:
        """Every event a served request writes after its response (lease release, outcome, the
        placement refusals still counted in their window) is in."""
        assert self.replica is not None
        flush_refusals(self.replica.edge.ctx)
        await self.replica.edge.ctx.settle()

    async def stop(self) -> None:
        if self.server and self.task:
            self.server.should_exit = True
            await self.task
        if self.replica:
            await self.replica.close()


class GatewayProcess:
    """`modelforge gateway` as a real subprocess (a second replica in its own process)."""

    def __init__(
        self,
        nats_url: str,
        log_dir: Path,
        operator_token: str = "",
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.nats_url, self.port, self.operator_token = nats_url, free_port(), operator_token
        self.env = dict(env or {})
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log_dir / f"gateway-{self.port}.log"
        self.process: subprocess.Popen[bytes] | None = None

    async def start(self) -> str:
        await asyncio.to_thread(self._spawn)
        assert self.process is not None
        await asyncio.to_thread(wait_for_port, self.port, self.process, self.log, WAIT_S)
        async with httpx.AsyncClient() as client:
            ready = await client.get(f"{self.url}/readyz")
            assert ready.status_code == 200, ready.text
        return self.url

    def _spawn(self) -> None:
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "modelforge.cli", "gateway", "--port", str(self.port)],
                env={
                    **os.environ,
                    "NATS_URL": self.nats_url,
                    "MODELFORGE_OPERATOR_TOKEN": self.operator_token,
                    **self.env,
                },
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(WAIT_S)


async def events_until(
    connection: Connection, stream: str, last: Callable[[object], bool], timeout: float = 20
) -> list[object]:
    """A stream's events from its start up to and including the first for which `last` holds
    (waiting for it to be written)."""
    seen: list[object] = []
    async with asyncio.timeout(timeout):
        async for record in subscribe(connection.client, 1, stream=stream):
            seen.append(record.event)
            if last(record.event):
                return seen
    raise AssertionError("unreachable: subscribe never ends")


async def folded_through(connection: Connection, urls: list[str], last: Callable[[object], bool]) -> None:
    """Wait for the first MF_EVENTS event for which `last` holds, then until every gateway at `urls`
    has folded it into its serving state."""
    async with asyncio.timeout(20):
        async for record in subscribe(connection.client, 1):
            if last(record.event):
                break
    async with httpx.AsyncClient(timeout=30) as http:
        for url in urls:
            ready = await http.get(f"{url}/readyz", params={"applied": record.sequence})
            assert ready.status_code == 200, ready.text


async def revise_policy(store: EventStore, urls: list[str], policy: c.SchedulerPolicyRevised) -> None:
    """Revise the scheduler policy; return once every gateway at `urls` has applied it."""
    seq = await store.append(Aggregate.SCHEDULER_POLICY, "default", [policy], ExpectedVersion.ANY)
    async with httpx.AsyncClient(timeout=30) as http:
        for url in urls:
            assert (await http.get(f"{url}/readyz", params={"applied": seq})).status_code == 200


async def set_policy(urls: list[str], token: str, settings: Mapping[str, float | bool]) -> dict[str, Any]:
    """Revise the scheduler policy as an operator does, through the first gateway's admin API (which
    refuses a policy the scheduler cannot run under); return the policy in force once every gateway
    at `urls` has applied it."""
    headers = {"authorization": f"Bearer {token}", "x-mf-operator": "tests"}
    async with httpx.AsyncClient(timeout=30) as http:
        revised = await http.post(
            f"{urls[0]}/admin/v1/scheduler/policy", json={"settings": dict(settings)}, headers=headers
        )
        assert revised.status_code == 200, revised.text
        applied = (await http.get(f"{urls[0]}/readyz")).json()["applied_sequence"]
        for url in urls[1:]:
            assert (await http.get(f"{url}/readyz", params={"applied": applied})).status_code == 200
    policy: dict[str, Any] = revised.json()["policy"]
    return policy


@contextlib.asynccontextmanager
async def stream_refusing_messages(connection: Connection, stream: str) -> AsyncIterator[None]:
    """`stream` refuses every message while the block runs (a message size limit none fits): a
    publish fails at once, as it would with the stream misconfigured or out of room."""
    js = connection.client.jetstream()
    config = (await js.stream_info(stream)).config
    await js.update_stream(dataclasses.replace(config, max_msg_size=1))
    try:
        yield
    finally:
        await js.update_stream(config)
