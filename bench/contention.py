"""Two models contending for one small CPU device, served in turns by two gateway processes; and the
worker process's hop against in-process serving.

Starts its own stack in a temporary folder: nats-server (from the wheel), a `modelforge agent` with
a 1 GiB CPU budget, two copies of MiniLM promoted as experiments, two `modelforge gateway`
processes, and a safety reserve (set through the admin API) under which only one copy fits. Then:

(1) one model: callers send one-text requests for copy A only: the raw limit of this stack;
(2) contention: the same callers, each request for A or B (seeded): requests served per second
    (ratio to (1)) and swaps (loads) per minute, against the most the eviction cooldown allows;
(3) the worker hop (bench/agent.py): one caller, each request through the capability server in
    this process and through a worker process in turn; target ≤ 0.2 ms added per request.

    .venv/bin/python -m bench.contention [--seconds 20] [--callers 24] [--hop-seconds 4]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import random
import shutil
import time
from pathlib import Path

import httpx
import msgspec
import uvloop

from bench.agent import manifest_of, minilm_home, worker_hop
from eventstore.connection import Connection, connect
from eventstore.provision import provision
from eventstore.store import EventStore
from gateway.clients.service import ClientService
from gateway.scheduler import required_bytes
from gateway.scheduler.policy import SchedulerPolicy
from gateway.serving.envelopes import envelope_of
from gateway.state.catalog import Catalog, evolve_catalog
from modelforge.devstack.nats_server import start_nats
from modelforge.devstack.processes import stop_pid
from streams import subjects
from streams.events import serving as s
from streams.messages import AcceleratorTelemetry
from streams.subjects import Aggregate

MIB = 1 << 20
BUDGET = 1024 * MIB
TOKEN = "bench-contention-operator"
TURN_S = 2.0  # the fairness window, and the eviction cooldown: the least a swapped-in model stays
POLICY = {
    "safety_reserve_fraction": 0.0,
    "safety_reserve_min_bytes": 64 * MIB,
    "runtime_margin_bytes": 8 * MIB,
    "cold_load_margin_min_bytes": 8 * MIB,
    "cold_load_margin_fraction": 0.05,
    "request_execution_floor_bytes": 4 * MIB,
    "telemetry_fresh_seconds": 30.0,
    "max_queue_wait_seconds": 45.0,
    "pressure_stable_seconds": 1.0,
    "fairness_window_seconds": TURN_S,
    "eviction_cooldown_seconds": TURN_S,
}


async def load(
    urls: list[str], key: str, models: tuple[str, ...], callers: int, seconds: float
) -> dict[str, int]:
    """Closed-loop callers for `seconds`: how many requests ended with each status."""
    rng = random.Random(24)
    statuses: dict[str, int] = {}
    end = time.perf_counter() + seconds
    headers = {"authorization": f"Bearer {key}", "x-request-timeout-ms": "45000"}
    limits = httpx.Limits(max_connections=callers * 2, max_keepalive_connections=callers * 2)

    async def caller(http: httpx.AsyncClient, index: int) -> None:
        i = index
        while time.perf_counter() < end:
            body = {"input": f"bench request {i}", "model": rng.choice(models)}
            response = await http.post(f"{urls[i % len(urls)]}/v1/embeddings", json=body, headers=headers)
            code = "200" if response.status_code == 200 else response.json()["error"]["code"]
            statuses[code] = statuses.get(code, 0) + 1
            i += callers

    async with httpx.AsyncClient(timeout=90, limits=limits) as http:
        await asyncio.gather(*(caller(http, i) for i in range(callers)))
    return statuses


async def cold_bytes(store: EventStore, deployment_id: str) -> int:
    """What a cold request for the deployment needs under POLICY: its load and its own floor."""
    records, _ = await store.load(Aggregate.DEPLOYMENT, deployment_id)
    catalog = Catalog()
    for record in records:
        catalog = evolve_catalog(catalog, record.event)  # type: ignore[arg-type]
    envelope, policy = (
        envelope_of(catalog.deployments[deployment_id]),
        msgspec.convert(POLICY, SchedulerPolicy),
    )
    return required_bytes(envelope, False, policy) + required_bytes(envelope, True, policy)


async def used_bytes(connection: Connection, node: str) -> int:
    sub = await connection.client.subscribe(f"{subjects.TELEMETRY_PREFIX}.{node}.>")
    await sub.next_msg(timeout=30)  # a full interval after whatever ran last
    used = msgspec.json.decode((await sub.next_msg(timeout=30)).data, type=AcceleratorTelemetry).used_bytes
    await sub.unsubscribe()
    return used


async def main(home: Path, root: Path, seconds: float, callers: int) -> None:
    agents = importlib.import_module("tests.support.agents")
    serving = importlib.import_module("tests.support.serving")
    shutil.copytree(root / agents.MINILM, root / "minilm-b")
    (root / "minilm-b" / "NOTICE").write_text("a second copy: a second model for the scheduler\n")
    server = start_nats(home)
    connection = await connect(server.url, "bench-contention")
    agent = agents.AgentProcess(server.url, "bench-node", root, home, **{"--cpu-memory-budget": str(BUDGET)})
    gateways = [serving.GatewayProcess(server.url, home, TOKEN) for _ in range(2)]
    try:
        await provision(connection.client)
        store = EventStore(connection)
        await agent.start(connection)
        deployments: dict[str, str] = {}
        for folder, route in ((agents.MINILM, "minilm-a"), ("minilm-b", "minilm-b")):
            artifacts = await serving.register_artifacts(store, agent.node, root, folder)
            measured = await serving.probe(connection, agent.node, artifacts, root)
            # no cap of their own (an experiment runs one request at a time): capacity is measured here
            uncapped = s.DeploymentCaps()
            deployments[route] = await serving.promote(store, artifacts, measured, route=route, caps=uncapped)
        issued = await ClientService(store).create(
            "bench", ["rag.embedding@1"], requests_per_minute=10_000_000, max_concurrency=1024
        )
        key = issued.key
        urls = [await gateway.start() for gateway in gateways]
        await serving.set_policy(urls, TOKEN, POLICY)
        started = time.perf_counter()
        one = await load(urls, key, ("minilm-a",), callers, seconds)  # A loads and runs alone
        one_s = time.perf_counter() - started
        # The reserve under which B fits only once A is gone (test_capacity_across_gateways sizes it so).
        need_b = await cold_bytes(store, deployments["minilm-b"])
        reserve = BUDGET - await used_bytes(connection, agent.node) - need_b + 16 * MIB
        await serving.set_policy(urls, TOKEN, {"safety_reserve_min_bytes": reserve})
        _, before = await store.load(Aggregate.ACCELERATOR, f"{agent.node}-cpu0")
        started = time.perf_counter()
        both = await load(urls, key, ("minilm-a", "minilm-b"), callers, seconds)
        both_s = time.perf_counter() - started
        records, _ = await store.load(Aggregate.ACCELERATOR, f"{agent.node}-cpu0")
        swaps = sum(
            1 for r in records if r.sequence > before and isinstance(r.event, s.ResidencyLoadRequested)
        )
        one_rate, both_rate = one.get("200", 0) / one_s, both.get("200", 0) / both_s
        print(
            f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; {callers} callers, {seconds:.0f} s a phase"
        )
        print(f"(1) one model:   {one_rate:7.1f} served/s   {one}")
        print(f"(2) contention:  {both_rate:7.1f} served/s   {both}")
        print(f"    ratio (2)/(1) served/s: {both_rate / one_rate:.2f}")
        per_minute, most = swaps * 60 / both_s, 60 / TURN_S
        print(f"    swaps: {swaps} loads, {per_minute:.1f} a minute ({per_minute / most:.2f} of the {most:.0f}"
              f" the {TURN_S:.0f} s cooldown allows)")  # fmt: skip
    finally:
        for gateway in gateways:
            gateway.stop()
        agent.stop()
        await connection.close()
        stop_pid(server.pid)


def run(seconds: float, callers: int, hop_seconds: float) -> None:
    home, root = minilm_home("mf-bench-contention-")
    asyncio.run(main(home, root, seconds, callers))
    uvloop.run(worker_hop(root, manifest_of(root / "minilm"), hop_seconds))  # the agent's loop


if __name__ == "__main__":
    cli = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    cli.add_argument("--seconds", type=float, default=20.0, help="each phase")
    cli.add_argument("--callers", type=int, default=24)
    cli.add_argument("--hop-seconds", type=float, default=4.0)
    given = cli.parse_args()
    run(given.seconds, given.callers, given.hop_seconds)
