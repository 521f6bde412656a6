"""Gateway fixtures: each test module gets its own nats-server, a real agent serving MiniLM
(promoted from a real probe), a service client and an in-process gateway replica; or, marked
SHARES_THE_STACK, the one such stack of the modules that leave it as they found it."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import msgspec
import pytest

from eventstore.connection import Connection, connect
from eventstore.provision import provision
from eventstore.store import EventStore
from gateway.clients.service import ClientService, IssuedKey
from gateway.scheduler import safety_reserve
from gateway.scheduler.overcommit import booked_bytes
from gateway.serving.background import append_until_recorded
from gateway.serving.capacity import Grant
from gateway.serving.outputs import JSON_OUTPUT
from gateway.serving.pipeline import serve
from gateway.serving.requests import RequestShape, Served, ServeRequest
from modelforge.devstack.nats_server import NatsServer, start_nats
from modelforge.devstack.processes import stop_pid
from nodeagent.models.pull import pull_minilm
from streams import subjects
from streams.contracts import EmbeddingInput
from streams.envelope import new_id
from streams.events import serving as s
from streams.events.requests import RequestFailed, RequestRejected
from tests.integration.projections.helpers import migrated
from tests.support.agents import MINILM, WAIT_S, AgentProcess
from tests.support.events import lease_granted
from tests.support.serving import (
    GatewayProcess,
    InProcessGateway,
    events_until,
    probe,
    promote,
    register_artifacts,
    set_policy,
)


class Stack(msgspec.Struct):
    nats_url: str
    connection: Connection
    store: EventStore
    node: str
    root: Path
    deployment_id: str
    key: IssuedKey
    gateway: InProcessGateway
    agent: AgentProcess


@pytest.fixture(scope="session")
def minilm_root(scratch: Path) -> Path:
    root = scratch / "gateway-artifacts"
    pull_minilm(root / MINILM, install_missing=False)
    return root


@contextlib.contextmanager
def nats_of_its_own(scratch: Path) -> Iterator[NatsServer]:
    """A new nats-server while the block runs: what it carries reaches no other stack."""
    server = start_nats(scratch / f"nats-{new_id()[:8]}")
    try:
        yield server
    finally:
        stop_pid(server.pid)


@pytest.fixture(scope="module")
def module_nats(scratch: Path) -> Iterator[NatsServer]:
    with nats_of_its_own(scratch) as server:
        yield server


SHARED = "shared_stack"
# A module whose tests leave the stack as they found it says `pytestmark = SHARES_THE_STACK`.
SHARES_THE_STACK = pytest.mark.usefixtures(SHARED)


@pytest.fixture(scope="module")
def stack(request: pytest.FixtureRequest) -> Stack:
    """The module's stack: its own (`own_stack`), or in a module marked SHARES_THE_STACK the
    one stack those modules share (building one costs an agent's start and a probe: 6-10 s)."""
    found: Stack = request.getfixturevalue(SHARED if SHARED in request.fixturenames else "own_stack")
    return found


@pytest.fixture(scope="module")
async def own_stack(module_nats: NatsServer, minilm_root: Path, scratch: Path) -> AsyncIterator[Stack]:
    async with minilm_stack(module_nats.url, minilm_root, scratch) as built:
        yield built


@pytest.fixture(scope="session")
async def shared_stack(minilm_root: Path, scratch: Path) -> AsyncIterator[Stack]:
    """For the modules whose tests only send requests, make keys, and read what that recorded: no
    policy, deployment, node or gateway of theirs outlives its test (a test's task that the shared
    gateway owns is then checked at the session's end: tests.support.tasks_left)."""
    with nats_of_its_own(scratch) as server:
        async with minilm_stack(server.url, minilm_root, scratch) as built:
            yield built


@contextlib.asynccontextmanager
async def minilm_stack(nats_url: str, minilm_root: Path, scratch: Path) -> AsyncIterator[Stack]:
    """MiniLM probed on a new agent and promoted, a key for it and an in-process gateway, on `nats_url`."""
    connection = await connect(nats_url, "gateway-tests")
    await provision(connection.client)
    store = EventStore(connection)
    node = f"node-{new_id()[:6]}"
    agent = AgentProcess(nats_url, node, minilm_root, scratch)
    await agent.start(connection)
    artifacts = await register_artifacts(store, node, minilm_root, MINILM)
    deployment_id = await promote(store, artifacts, await probe(connection, node, artifacts, minilm_root))
    key = await ClientService(store).create(
        f"app-{new_id()[:6]}", ["rag.embedding@1"], requests_per_minute=100_000, max_concurrency=64
    )
    gateway = InProcessGateway()
    await gateway.start(nats_url)
    assert gateway.replica is not None
    live = gateway.replica.edge.ctx.live
    # The node takes placements once the gateway holds fresh telemetry from it: the last sample
    # it found at start may be past the staleness bound when the set-up above ran long (a busy CI).
    assert await live.wait_for(lambda: live.node_live(node), 30)
    yield Stack(nats_url, connection, store, node, minilm_root, deployment_id, key, gateway, agent)
    await gateway.stop()
    agent.stop()
    await connection.close()


class ModelStack(msgspec.Struct):
    """One model promoted on an agent of its own, a key for its capability, and a gateway."""

    url: str
    key: str
    connection: Connection
    gateway: InProcessGateway
    node: str
    agent: AgentProcess


@contextlib.asynccontextmanager
async def one_model_stack(
    nats_url: str,
    root: Path,
    scratch: Path,
    folder: str,
    capability: str,
    space: s.EmbeddingSpace | None = None,
) -> AsyncIterator[ModelStack]:
    """The model in `root`/`folder` probed on a new agent and promoted as the stable deployment of
    `capability` under the folder's name (declaring `space`, for an embedding), while the block runs."""
    connection = await connect(nats_url, f"{folder}-tests")
    await provision(connection.client)
    store = EventStore(connection)
    node = f"node-{new_id()[:6]}"
    agent = AgentProcess(nats_url, node, root, scratch)
    await agent.start(connection)
    artifacts = await register_artifacts(store, node, root, folder, capability=capability)
    measured = await probe(connection, node, artifacts, root)
    await promote(store, artifacts, measured, model_name=folder, space=space)
    key = await ClientService(store).create(f"{folder}-{new_id()[:6]}", [capability])
    gateway = InProcessGateway()
    try:
        url = await gateway.start(nats_url)
        assert gateway.replica is not None
        live = gateway.replica.edge.ctx.live
        assert await live.wait_for(lambda: live.node_live(node), 30)  # fresh telemetry, as `stack`
        yield ModelStack(url, key.key, connection, gateway, node, agent)
    finally:
        await gateway.stop()
        agent.stop()
        await connection.close()


class ProcessStack(msgspec.Struct):
    url: str
    key: str
    connection: Connection


@contextlib.asynccontextmanager
async def process_stack(
    nats_url: str, root: Path, scratch: Path, env: dict[str, str]
) -> AsyncIterator[ProcessStack]:
    """MiniLM promoted on an agent process, a key for it and a gateway process, both started with
    `env`, while the block runs."""
    connection = await connect(nats_url, f"process-stack-{new_id()[:6]}")
    await provision(connection.client)
    store = EventStore(connection)
    node = f"node-{new_id()[:6]}"
    agent = AgentProcess(nats_url, node, root, scratch, env=env)
    gateway = GatewayProcess(nats_url, scratch, env=env)
    try:
        await agent.start(connection)
        artifacts = await register_artifacts(store, node, root, MINILM)
        await promote(store, artifacts, await probe(connection, node, artifacts, root))
        key = await ClientService(store).create(f"app-{new_id()[:6]}", ["rag.embedding@1"])
        yield ProcessStack(await gateway.start(), key.key, connection)
    finally:
        # Off the loop: a process exporting its last spans as it stops may export to this loop.
        await asyncio.gather(asyncio.to_thread(gateway.stop), asyncio.to_thread(agent.stop))
        await connection.close()


async def another_deployment(
    stack: Stack, folder: str, route: str, caps: s.DeploymentCaps | None = None
) -> str:
    """A second copy of MiniLM on the stack's node, probed and promoted under `route` (an experiment:
    one request at a time unless `caps` says otherwise): not resident, and known to the stack's
    gateway."""
    if not (stack.root / folder).exists():
        shutil.copytree(stack.root / MINILM, stack.root / folder)
    artifacts = await register_artifacts(stack.store, stack.node, stack.root, folder)
    measured = await probe(stack.connection, stack.node, artifacts, stack.root)
    deployment = await promote(stack.store, artifacts, measured, route=route, caps=caps)
    assert stack.gateway.replica is not None  # the stack's gateway serves it from here on
    live = stack.gateway.replica.edge.ctx.live

    def routed() -> str:  # once the experiment is active, its route reaches it
        found = live.catalog.resolve(artifacts.capability, route)
        return found.deployment_id if found else ""

    assert await live.wait_for(lambda: routed() == deployment, 10)
    return deployment


POLICY_TOKEN = "operator-token-for-policy-changes"
# Pressure that refuses cold loads only past the device's budget: the loosest the admin API allows.
PRESSURE_PAST_BUDGET = {"pressure_elevated_at": 0.98, "pressure_high_at": 0.99, "pressure_critical_at": 1.0}


@contextlib.asynccontextmanager
async def policy_while(stack: Stack, settings: dict[str, float | bool]) -> AsyncIterator[None]:
    """The scheduler policy with `settings` while the block runs, revised through the admin API as
    an operator revises it; the settings as they were, after it."""
    assert stack.gateway.replica is not None
    before = msgspec.to_builtins(stack.gateway.replica.edge.ctx.live.policy)
    stack.gateway.replica.edge.operator_token = POLICY_TOKEN
    urls = [stack.gateway.url]
    await set_policy(urls, POLICY_TOKEN, settings)
    try:
        yield
    finally:
        await set_policy(urls, POLICY_TOKEN, {name: before[name] for name in settings})


def books_filled(stack: Stack, accelerator: str) -> tuple[list[s.LeaseGranted], list[s.LeaseReleased]]:
    """Leases, as placement could grant them, that leave a request for the stack's deployment
    nothing but to wait in line: one on each other resident (busy, so not evictable) and one of
    the stack's deployment holding all that is left on the books (total - reserve - what they hold);
    and their releases."""
    assert stack.gateway.replica is not None
    live = stack.gateway.replica.edge.ctx.live
    state = live.accelerators[accelerator]
    expires = datetime.fromtimestamp(time.time() + 120, UTC)
    others = [r.deployment_id for r in state.residents if r.deployment_id != stack.deployment_id]
    room = state.total_bytes - safety_reserve(state.total_bytes, live.policy) - booked_bytes(state)
    grants = [
        lease_granted(
            f"blocker-{new_id()[:6]}", accelerator, expires, reserved_bytes=size, deployment_id=owner
        )
        for owner, size in [
            *((other, 1 << 20) for other in others),
            (stack.deployment_id, room - (len(others) << 20)),
        ]
    ]
    releases = [
        s.LeaseReleased(lease_id=g.lease_id, accelerator_id=accelerator, outcome="completed") for g in grants
    ]
    return grants, releases


async def lease_held(stack: Stack, ttl_s: float) -> Grant:
    """A small lease on the stack's accelerator, appended by its gateway until recorded, as its
    background writers append: another writer's event landing first (an agent's, a release
    still going out from the test before) is a conflict caught up on and appended again."""
    assert stack.gateway.replica is not None
    accelerator = f"{stack.node}-cpu0"
    expires = datetime.fromtimestamp(time.time() + ttl_s, UTC)
    lease = lease_granted(f"held-{new_id()[:6]}", accelerator, expires, deployment_id=stack.deployment_id)
    assert await append_until_recorded(stack.gateway.replica.edge.ctx, accelerator, [lease])
    return Grant(
        lease_id=lease.lease_id,
        accelerator_id=accelerator,
        node_id=stack.node,
        deployment_id=stack.deployment_id,
        cold=False,
        fingerprint=lease.decision_fingerprint,
    )


@contextlib.asynccontextmanager
async def stack_admin(stack: Stack, token: str) -> AsyncIterator[httpx.AsyncClient]:
    """The stack gateway's admin API, as an operator holding `token` (made its shared token)."""
    assert stack.gateway.replica is not None
    stack.gateway.replica.edge.operator_token = token
    headers = {"authorization": f"Bearer {token}", "x-mf-operator": "tests"}
    async with httpx.AsyncClient(
        base_url=f"{stack.gateway.url}/admin/v1", headers=headers, timeout=60
    ) as http:
        yield http


async def key_issued(stack: Stack, name: str, scopes: list[str], **limits: int) -> IssuedKey:
    """A new client's key, once the stack's gateway holds it (as the admin API answers: a request
    made with it right away would otherwise meet a directory that has not seen it, and a 401)."""
    issued = await ClientService(stack.store).create(name, scopes, **limits)
    assert stack.gateway.replica is not None
    await stack.gateway.replica.edge.directory.wait_until_applied(issued.sequence, timeout=WAIT_S)
    return issued


async def first_event(stack: Stack, stream: str, wanted: Callable[[object], bool]) -> object:
    return (await events_until(stack.connection, stream, wanted))[-1]


async def failure_of(stack: Stack, request_id: str) -> RequestFailed:
    """How the request `request_id` was recorded failed."""
    failed = await first_event(
        stack, subjects.REQUESTS_STREAM, lambda e: isinstance(e, RequestFailed) and e.request_id == request_id
    )
    assert isinstance(failed, RequestFailed)
    return failed


async def release_of(stack: Stack, request_id: str) -> s.LeaseReleased:
    """How the lease granted to `request_id` was given back."""
    lease = await first_event(
        stack,
        subjects.EVENTS_STREAM,
        lambda e: isinstance(e, s.LeaseGranted) and e.request_id == request_id,
    )
    released = await first_event(
        stack,
        subjects.EVENTS_STREAM,
        lambda e: isinstance(e, s.LeaseReleased) and e.lease_id == lease.lease_id,  # type: ignore[attr-defined]
    )
    assert isinstance(released, s.LeaseReleased)
    return released


async def _admitted() -> None:
    return None


async def serve_directly(
    stack: Stack,
    request_id: str,
    texts: list[str],
    render: Callable[[Served[bytes]], object] | None = None,
    admitted: Callable[[], Awaitable[None]] = _admitted,
    model: str = "",
    timeout_s: float = 60.0,
) -> Served[bytes]:
    """The serving path of the stack's in-process gateway, called as the HTTP edge calls it, with
    `timeout_s` to the request's deadline."""
    assert stack.gateway.replica is not None
    request = ServeRequest(
        request_id=request_id,
        client_id=stack.key.client_id,
        capability="rag.embedding@1",
        payload=msgspec.json.encode(EmbeddingInput(texts=texts)),
        shape=RequestShape(items=len(texts), chars=sum(map(len, texts))),
        deadline=time.time() + timeout_s,
        started=time.perf_counter(),
        validation_ms=0.0,
        resolution_ms=0.0,
        model=model,
    )
    return await serve(
        stack.gateway.replica.edge.ctx, request, admitted=admitted, output=JSON_OUTPUT, render=render
    )


async def refused_leaving_no_trace(
    connection: Connection,
    gateway: InProcessGateway,
    path: str,
    key: str | None,
    body: object = None,
    *,
    content: bytes | None = None,
    headers: dict[str, str] | None = None,
    recorded: bool = True,
) -> httpx.Response:
    """POST `body` (as JSON, or `content` as is) to `path` and return the refusal, having checked
    that it is in the one error shape and changed no state: MF_EVENTS is as it was, and the
    request's only event in MF_REQUESTS is its own `RequestRejected` (none at all for a refusal
    before the key was known, or with `recorded` False: a capability that does not exist)."""
    js = connection.client.jetstream()
    await gateway.settled()  # earlier requests' lease releases are not this request's doing
    before = (await js.stream_info(subjects.EVENTS_STREAM)).state.last_seq
    requests_before = (await js.stream_info(subjects.REQUESTS_STREAM)).state.last_seq
    sent = {"authorization": f"Bearer {key}"} if key else {}
    if content is not None:
        sent["content-type"] = "application/json"
    async with httpx.AsyncClient(timeout=60) as http:
        response = await http.post(
            f"{gateway.url}{path}",
            json=body if content is None else None,
            content=content,
            headers={**sent, **(headers or {})},
        )
    assert 400 <= response.status_code < 600, response.text
    request_id = response.headers["x-request-id"]
    error = response.json()["error"]
    assert set(error) >= {"code", "message", "type", "param", "request_id"}
    assert error["request_id"] == request_id
    if key is None or response.status_code == 401 or not recorded:
        await gateway.settled()
        assert (await js.stream_info(subjects.REQUESTS_STREAM)).state.last_seq == requests_before
    else:
        events = await events_until(
            connection,
            subjects.REQUESTS_STREAM,
            lambda e: isinstance(e, RequestRejected) and e.request_id == request_id,
        )
        own = [e for e in events if getattr(e, "request_id", None) == request_id]
        assert [(type(e), e.code) for e in own] == [(RequestRejected, error["code"])]  # type: ignore[attr-defined]
    await gateway.settled()
    assert (await js.stream_info(subjects.EVENTS_STREAM)).state.last_seq == before
    return response


class TwoGateways(msgspec.Struct):
    urls: list[str]
    store: EventStore
    connection: Connection
    key: str  # a client with limits no test here reaches


@pytest.fixture(scope="module")
async def gateways(stack: Stack, scratch: Path) -> AsyncIterator[TwoGateways]:
    async with two_gateways(stack, scratch) as both:
        yield both


@contextlib.asynccontextmanager
async def two_gateways(
    stack: Stack, scratch: Path, env: dict[str, str] | None = None
) -> AsyncIterator[TwoGateways]:
    """Two gateway processes on the stack's NATS, started with `env`, while the block runs."""
    processes = [
        GatewayProcess(stack.nats_url, scratch, env=env),
        GatewayProcess(stack.nats_url, scratch, env=env),
    ]
    urls = [await process.start() for process in processes]
    await ready_through(urls, stack.key.sequence, 5)
    try:
        yield TwoGateways(urls, stack.store, stack.connection, stack.key.key)
    finally:
        for process in processes:
            process.stop()


@contextlib.asynccontextmanager
async def coalescing_after(stack: Stack, runs: int) -> AsyncIterator[None]:
    """The stack's gateway has requests share runs from `runs` in flight (0: never) while the
    block runs (`gateway.serving.coalescing`)."""
    assert stack.gateway.replica is not None
    coalescing = stack.gateway.replica.edge.ctx.coalescing
    before, coalescing.after = coalescing.after, runs
    try:
        yield
    finally:
        coalescing.after = before


async def ready_through(urls: list[str], clients_applied: int, timeout: float) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        for url in urls:
            response = await http.get(
                f"{url}/readyz", params={"clients_applied": clients_applied}, timeout=timeout + 5
            )
            assert response.json()["checks"]["clients_applied"], response.text


@pytest.fixture
async def read_model_database(
    stack: Stack, fresh_database: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[str]:
    """A fresh, migrated read model the stack's gateway reads (DATABASE_URL) while the test runs;
    the gateway's session on it is closed before the database is dropped."""
    await migrated(fresh_database)
    monkeypatch.setenv("DATABASE_URL", fresh_database)
    yield fresh_database
    assert stack.gateway.replica is not None
    await stack.gateway.replica.edge.read_models.close()
