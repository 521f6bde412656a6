"""Two gateway processes, two models that cannot be resident together on one small CPU device:
every request ends with an answer or a clear refusal, and the accelerator's books never go past
its schedulable capacity."""

from __future__ import annotations

import asyncio
import random
import shutil
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import msgspec
import pytest

from eventstore.connection import Connection, connect
from eventstore.provision import provision
from eventstore.store import EventStore, ExpectedVersion
from eventstore.subscription import subscribe
from gateway.clients.service import ClientService
from gateway.operations.service import POLICY_ID
from gateway.scheduler import account, required_bytes
from gateway.scheduler.policy import DEFAULT_POLICY, SchedulerPolicy
from gateway.scheduler.state import AcceleratorState
from gateway.serving.envelopes import envelope_of
from gateway.state.accelerators import evolve_accelerator, new_accelerator
from gateway.state.catalog import Catalog, evolve_catalog
from gateway.state.live import policy_from
from modelforge.devstack.nats_server import NatsServer
from streams import subjects
from streams.codec import UnknownEvent
from streams.contracts import EMBEDDING
from streams.envelope import new_id
from streams.events import serving as s
from streams.messages import AcceleratorTelemetry
from streams.subjects import Aggregate
from tests.support.agents import MINILM, AgentProcess
from tests.support.serving import (
    GatewayProcess,
    probe,
    promote,
    register_artifacts,
    set_policy,
    stream_refusing_messages,
)

MIB = 1 << 20
BUDGET = 1024 * MIB
TOKEN = "operator-token-for-capacity-tests"
SMALL = {  # margins sized for a CPU device of 1 GiB, not a GPU
    "safety_reserve_fraction": 0.0,
    "runtime_margin_bytes": 8 * MIB,
    "cold_load_margin_min_bytes": 8 * MIB,
    "cold_load_margin_fraction": 0.05,
    "request_execution_floor_bytes": 4 * MIB,
    "eviction_cooldown_seconds": 0.0,
    "telemetry_fresh_seconds": 30.0,
    "max_queue_wait_seconds": 30.0,
    "global_queue_limit": 64,
    # The warm-up's burst of leases runs the device near full on purpose, past the CRITICAL level;
    # that level must not outlast the burst by the default 30 s, refusing the cold loads under test.
    "pressure_stable_seconds": 1.0,
}


class TwoModels(msgspec.Struct):
    connection: Connection
    store: EventStore
    accelerator_id: str
    gateways: list[str]
    key: str
    policy: SchedulerPolicy  # in force after the fixture
    catalog_events: list[object]


async def _telemetry(connection: Connection, node: str) -> AcceleratorTelemetry:
    sub = await connection.client.subscribe(f"{subjects.TELEMETRY_PREFIX}.{node}.>")
    try:
        msg = await sub.next_msg(timeout=30)
        return msgspec.json.decode(msg.data, type=AcceleratorTelemetry)
    finally:
        await sub.unsubscribe()


@pytest.fixture(scope="module")
async def two_models(module_nats: NatsServer, minilm_root: Path, scratch: Path) -> AsyncIterator[TwoModels]:
    if not (minilm_root / "minilm-b").exists():
        shutil.copytree(minilm_root / MINILM, minilm_root / "minilm-b")
        (minilm_root / "minilm-b" / "NOTICE").write_text("second copy, a second model for the scheduler\n")
    connection = await connect(module_nats.url, "capacity-tests")
    node = f"node-{new_id()[:6]}"
    agent = AgentProcess(module_nats.url, node, minilm_root, scratch, **{"--cpu-memory-budget": str(BUDGET)})
    gateways = [GatewayProcess(module_nats.url, scratch, TOKEN) for _ in range(2)]
    try:  # a set-up that fails half-way stops what it started too
        yield await _set_up(connection, agent, gateways, minilm_root)
    finally:
        for gateway in gateways:
            gateway.stop()
        agent.stop()
        await connection.close()


async def _set_up(
    connection: Connection, agent: AgentProcess, gateways: list[GatewayProcess], minilm_root: Path
) -> TwoModels:
    await provision(connection.client)
    store = EventStore(connection)
    node = agent.node
    await agent.start(connection)
    set_a = await register_artifacts(store, node, minilm_root, MINILM)
    set_b = await register_artifacts(store, node, minilm_root, "minilm-b")
    # Both as experiments (the lab channel): lab work may evict lab residents, never production.
    # Without a cap of their own (an experiment runs one request at a time): capacity decides here.
    for artifacts, route in ((set_a, "minilm-a"), (set_b, "minilm-b")):
        measured = await probe(connection, node, artifacts, minilm_root)
        await promote(store, artifacts, measured, route=route, caps=s.DeploymentCaps())
    key = await ClientService(store).create(
        f"load-{new_id()[:6]}", ["rag.embedding@1"], requests_per_minute=100_000, max_concurrency=1_000
    )
    urls = [await gateway.start() for gateway in gateways]
    small = await set_policy(urls, TOKEN, {**SMALL, "safety_reserve_min_bytes": 64 * MIB})
    headers = {"authorization": f"Bearer {key.key}"}
    # Load model A and work it as hard as the test will, so that the agent's memory under load
    # (its runtime's arenas stay allocated) is what the reserve is sized against.
    async with httpx.AsyncClient(timeout=60) as http:
        warm = await asyncio.gather(
            *(
                http.post(
                    f"{urls[i % 2]}/v1/embeddings",
                    json={"input": f"warm {i}", "model": "minilm-a"},
                    headers=headers,
                )
                for i in range(64)
            )
        )
        assert all(r.status_code == 200 for r in warm), [r.text for r in warm if r.status_code != 200][:1]
    await _telemetry(connection, node)  # one full interval after the burst
    observed = (await _telemetry(connection, node)).used_bytes
    catalog_events = await _deployments(connection)
    catalog = Catalog()
    for event in catalog_events:
        catalog = evolve_catalog(catalog, event)  # type: ignore[arg-type]
    # Size the reserve so that B fits only once A is gone: with A resident B's load is 16 MiB short
    # (its first request's execution floor besides);
    # evicting A frees what A holds, enough to absorb the working memory a loaded process grows by.
    b = next(d for d in catalog.deployments.values() if d.route == "minilm-b")
    need_b = required_bytes(envelope_of(b), False, msgspec.convert(small, SchedulerPolicy))
    revised = await set_policy(
        urls, TOKEN, {"safety_reserve_min_bytes": BUDGET - observed - need_b + 16 * MIB}
    )
    return TwoModels(
        connection,
        store,
        f"{node}-cpu0",
        urls,
        key.key,
        msgspec.convert(revised, SchedulerPolicy),
        catalog_events,
    )


async def _deployments(connection: Connection) -> list[object]:
    from eventstore.reading import read_subject_range

    records = await read_subject_range(connection.client, subjects.EVENTS_STREAM, "mf.evt.deployment.>")
    return [r.event for r in records if not isinstance(r.event, UnknownEvent)]


def _catalog(two_models: TwoModels) -> Catalog:
    catalog = Catalog()
    for event in two_models.catalog_events:
        catalog = evolve_catalog(catalog, event)  # type: ignore[arg-type]
    return catalog


async def _accelerator_events_until(
    connection: Connection, accelerator_id: str, start: int, last: Callable[[object], bool]
) -> list[object]:
    seen: list[object] = []
    scope = subjects.aggregate_filter(Aggregate.ACCELERATOR, accelerator_id)
    async with asyncio.timeout(60):
        async for record in subscribe(connection.client, start, filter_subject=scope):
            seen.append(record.event)
            if last(record.event):
                return seen
    raise AssertionError("unreachable: subscribe never ends")


async def test_an_always_warm_model_evicts_an_idle_on_demand_resident_to_be_loaded(
    two_models: TwoModels,
) -> None:
    # The fixture leaves A resident and B short of room while A is.
    routes = {d.route: d.deployment_id for d in _catalog(two_models).deployments.values()}
    a, b = routes["minilm-a"], routes["minilm-b"]
    start = (
        await two_models.connection.client.jetstream().stream_info(subjects.EVENTS_STREAM)
    ).state.last_seq + 1
    warm = s.ResidencyPolicyChanged(deployment_id=b, residency=s.ResidencyPolicy(kind="always_warm"))
    await two_models.store.append(Aggregate.DEPLOYMENT, b, [warm], ExpectedVersion.ANY)
    try:
        seen = await _accelerator_events_until(
            two_models.connection,
            two_models.accelerator_id,
            start,
            lambda e: isinstance(e, s.ResidencyLoaded) and e.deployment_id == b,
        )
    finally:
        on_demand = s.ResidencyPolicyChanged(deployment_id=b, residency=s.ResidencyPolicy())
        await two_models.store.append(Aggregate.DEPLOYMENT, b, [on_demand], ExpectedVersion.ANY)
    kinds = [type(e).__name__ for e in seen]
    planned = next(e for e in seen if isinstance(e, s.EvictionPlanned))
    assert (planned.for_deployment_id, planned.victims) == (b, (a,))
    unloaded = next(e for e in seen if isinstance(e, s.ResidencyUnloaded))
    completed = next(e for e in seen if isinstance(e, s.EvictionCompleted))
    assert (completed.eviction_id, completed.reclaimed_bytes, completed.outcome) == (
        planned.eviction_id,
        unloaded.reclaimed_bytes,
        "completed",
    )
    order = [kinds.index(k) for k in ("EvictionPlanned", "ResidencyUnloaded", "EvictionCompleted")]
    assert order == sorted(order), kinds
    assert kinds.count("EvictionPlanned") == 1, kinds  # no second eviction while the first ran


async def test_an_eviction_whose_unload_job_cannot_be_sent_keeps_its_victim_and_ends_failed(
    two_models: TwoModels,
) -> None:
    # The test before leaves B resident. Size the reserve so that A fits only once B is evicted.
    routes = {d.route: d for d in _catalog(two_models).deployments.values()}
    a, b = routes["minilm-a"], routes["minilm-b"]
    node = two_models.accelerator_id.removesuffix("-cpu0")
    observed = (await _telemetry(two_models.connection, node)).used_bytes
    need_a = required_bytes(envelope_of(a), False, two_models.policy)
    await set_policy(
        two_models.gateways, TOKEN, {"safety_reserve_min_bytes": BUDGET - observed - need_a + 16 * MIB}
    )
    headers = {"authorization": f"Bearer {two_models.key}"}
    url = f"{two_models.gateways[0]}/v1/embeddings"
    try:
        async with (
            httpx.AsyncClient(timeout=60) as http,
            stream_refusing_messages(two_models.connection, subjects.WORK_STREAM),
        ):
            refused = await http.post(url, json={"input": "a", "model": "minilm-a"}, headers=headers)
            kept = await http.post(url, json={"input": "b", "model": "minilm-b"}, headers=headers)
    finally:
        restored = {"safety_reserve_min_bytes": two_models.policy.safety_reserve_min_bytes}
        await set_policy(two_models.gateways, TOKEN, restored)
    assert refused.status_code == 503, refused.text
    assert refused.json()["error"]["code"] == "CAPABILITY_UNAVAILABLE"
    assert "unload job could not be sent" in refused.json()["error"]["message"]
    records, _ = await two_models.store.load(Aggregate.ACCELERATOR, two_models.accelerator_id)
    planned = [r.event for r in records if isinstance(r.event, s.EvictionPlanned)][-1]
    assert (planned.for_deployment_id, planned.victims) == (a.deployment_id, (b.deployment_id,))
    back = [r.event for r in records if isinstance(r.event, s.ResidencyUnloadFailed)][-1]
    assert (back.deployment_id, back.code) == (b.deployment_id, "CAPABILITY_UNAVAILABLE")
    completed = await _accelerator_events_until(
        two_models.connection,
        two_models.accelerator_id,
        1,
        lambda e: isinstance(e, s.EvictionCompleted) and e.eviction_id == planned.eviction_id,
    )
    assert (completed[-1].outcome, completed[-1].reclaimed_bytes) == ("failed", 0)  # type: ignore[attr-defined]
    # The victim is back on the books as resident: it serves without any job being sent.
    assert kept.status_code == 200, kept.text


# The storm: seeded requests for both models from both gateways, each with the longest deadline the
# embedding contract grants (30 s: a client's x-request-timeout-ms may shorten it, never lengthen it).
# That leaves room for a few swaps on a quiet machine (3-5 s each: a fairness window, an unload and
# a cold load); a loaded one swaps in ~10 s. A request sent in its model's turn is served in it (the
# window runs from the end of the load: gateway.serving.line); one sent after waits for the other
# model's turn and its own model's next load: where two cold loads take most of 30 s, it runs out.
STORM_REQUESTS, IN_FLIGHT, SEED = 200, 24, 24
DEADLINE_MS = EMBEDDING.limits.default_timeout_ms
# A model keeps the device at least a fairness window: the eviction cooldown is set to it.
FAIRNESS_S = 2.0


class Outcome(msgspec.Struct):
    model: str
    status: int
    sent_at: float  # POSIX seconds, as the events' own stamps
    ended_at: float
    code: str = ""
    message: str = ""
    reasons: list[str] = []


async def _storm(two_models: TwoModels) -> list[Outcome]:
    rng = random.Random(SEED)
    plan = [(rng.choice(("minilm-a", "minilm-b")), rng.randrange(2)) for _ in range(STORM_REQUESTS)]
    slots = asyncio.Semaphore(IN_FLIGHT)
    limits = httpx.Limits(max_connections=IN_FLIGHT * 2, max_keepalive_connections=IN_FLIGHT * 2)

    async def one(i: int, http: httpx.AsyncClient) -> Outcome:
        model, gateway = plan[i]
        headers = {"authorization": f"Bearer {two_models.key}", "x-request-timeout-ms": str(DEADLINE_MS)}
        async with slots:
            sent = time.time()
            response = await http.post(
                f"{two_models.gateways[gateway]}/v1/embeddings",
                json={"input": f"storm {i}", "model": model},
                headers=headers,
            )
        ended = time.time()
        if response.status_code == 200:
            return Outcome(model, 200, sent, ended)
        error = response.json()["error"]
        reasons = error.get("details", {}).get("reason_codes", [])
        return Outcome(model, response.status_code, sent, ended, error["code"], error["message"], reasons)

    async with httpx.AsyncClient(timeout=60, limits=limits) as http:
        return await asyncio.gather(*(one(i, http) for i in range(STORM_REQUESTS)))


async def _over_commits(two_models: TwoModels) -> list[int]:
    """Replay the accelerator's own events: the sequences after which the books held more than is
    schedulable (resident + leased > total - reserve), each event judged under the scheduler policy
    in force when it was decided."""
    revisions, _ = await two_models.store.load(Aggregate.SCHEDULER_POLICY, POLICY_ID)
    catalog = _catalog(two_models)
    records, _ = await two_models.store.load(Aggregate.ACCELERATOR, two_models.accelerator_id)
    state = new_accelerator(two_models.accelerator_id, "", BUDGET)
    over: list[int] = []
    for record in records:
        assert record.envelope is not None
        state = evolve_accelerator(state, record.event, record.envelope.occurred_at, catalog)  # type: ignore[arg-type]
        in_force = [r.event for r in revisions if r.sequence < record.sequence]
        policy = policy_from(in_force[-1]) if in_force else DEFAULT_POLICY  # type: ignore[arg-type]
        budget = account(state, policy, 0.0)
        if budget.resident_bytes + budget.leased_bytes > BUDGET - budget.safety_reserve_bytes:
            over.append(record.sequence)
        _print_refusal(record.sequence, record.event, state)
    return over


def _print_refusal(sequence: int, event: object, state: AcceleratorState) -> None:
    """Evidence for a refusal the storm must not make (any but a deadline's): what it needed and
    had, and the books it was decided against (measured bytes; the telemetry is not on the record)."""
    if isinstance(event, s.PlacementRejected) and event.verdict not in ("QUEUE", "REJECT_DEADLINE"):
        books = [
            (r.deployment_id, r.state, r.measured_bytes // MIB, r.active_leases) for r in state.residents
        ]
        print(
            f"refused at {sequence}: {event.deployment_id} {event.verdict} {event.reason_codes}, required"
            f" {event.required_bytes}, schedulable {event.schedulable_bytes}; residents (MiB) {books},"
            f" {len(state.leases)} leases"
        )


async def test_a_storm_on_two_models_that_cannot_share_the_device_is_served_in_turns_within_its_deadlines(
    two_models: TwoModels,
) -> None:
    turns = {
        "fairness_window_seconds": FAIRNESS_S,
        "eviction_cooldown_seconds": FAIRNESS_S,
        "max_queue_wait_seconds": DEADLINE_MS / 1000,
    }
    await set_policy(two_models.gateways, TOKEN, turns)
    _, before = await two_models.store.load(Aggregate.ACCELERATOR, two_models.accelerator_id)
    started = time.time()
    try:
        outcomes = await _storm(two_models)
    finally:
        lasted_s = time.time() - started
        await set_policy(
            two_models.gateways, TOKEN, {name: getattr(two_models.policy, name) for name in turns}
        )
    records, _ = await two_models.store.load(Aggregate.ACCELERATOR, two_models.accelerator_id)
    swaps = sum(1 for r in records if r.sequence > before and isinstance(r.event, s.ResidencyLoadRequested))
    routes = {d.deployment_id: d.route for d in _catalog(two_models).deployments.values()}
    loads = [  # (model, when its load ended)
        (routes[r.event.deployment_id], r.envelope.occurred_at.timestamp())
        for r in records
        if r.sequence > before and r.envelope is not None and isinstance(r.event, s.ResidencyLoaded)
    ]
    served = sum(1 for o in outcomes if o.status == 200)
    refused = [o for o in outcomes if o.status != 200]
    print(f"storm: {served}/{len(outcomes)} served in {lasted_s:.1f} s, {swaps} loads")
    print("loads ended (s into the storm):", [(m, round(at - started, 1)) for m, at in loads])
    for o in refused:
        sent_s, waited_s = round(o.sent_at - started, 1), round(o.ended_at - o.sent_at, 1)
        print(f"refused: {o.model} sent at {sent_s} s, after {waited_s} s: {o.status} {o.code} {o.message}")

    assert await _over_commits(two_models) == []
    assert served >= 0.9 * len(outcomes), refused[:5]
    # A refusal only where a deadline could not be met, and it says so: run out waiting, or unable
    # to see critical pressure fall in time.
    assert all(
        (o.status, o.code) in {(504, "REQUEST_TIMEOUT"), (503, "PRESSURE_CRITICAL")}
        and "deadline" in o.message
        for o in refused
    ), refused
    # Each model keeps the device at least a fairness window once it is loaded: no thrash.
    assert swaps <= 1 + lasted_s / FAIRNESS_S, (swaps, lasted_s)
