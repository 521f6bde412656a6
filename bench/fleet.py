"""Fleet throughput and failover on one machine (issue 19), one run.

Starts the production shape of tests/support/fleet.py twice, in a temporary folder: a three-server
NATS cluster (TLS, every stream on three), two `modelforge gateway` processes, and one agent, then
two (each pinned to one core, each fetching MiniLM into its own cache; a copy on every agent:
`replicas.min`). Closed-loop clients send one-text embedding requests. Then:

(1) throughput through 1 and 2 gateways x 1 and 2 agents, for a fixed time each: requests served
    per second, as a ratio to 1 gateway x 1 agent (the raw limit: one agent's core on this machine);
    the healthy error rate (target 0);
(2) an agent SIGKILLed under load: seconds from the kill to its leases released (its accelerator
    reconciled to cold), to the first request it held served by the other copy, and to full service
    (the last request the loss slowed or failed answered); target <= 2 heartbeat intervals;
(3) the nats-server leading MF_EVENTS SIGKILLed under load: seconds to a new leader, to every lease
    of the requests then in flight released, and to full service; target <= 5 s. Full service is
    also given leaving out the requests the loss slowed outside placement (a client-limit message
    or MF_REQUESTS: their own elections), and how many requests ran under a standby lease
    (`MODELFORGE_STANDBY_LEASES=4 python -m bench.fleet` turns those on: the gateways inherit it).

    .venv/bin/python -m bench.fleet [--seconds 10] [--clients 16]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import shutil
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.agent import minilm_home
from eventstore.connection import connect
from streams import subjects
from streams.events import serving as s
from streams.events.requests import RequestCompleted

SLOW = 4.0  # a request slowed by a loss: it waited this many times the healthy p99, or more


def pinned(index: int) -> set[int]:
    """Agent `index` on one core of its own (as far as the machine has them)."""
    return {index % (os.cpu_count() or 1)}


async def throughput(fleet: Any, urls: list[str], clients: int, seconds: float) -> tuple[float, list[Any]]:
    """Requests served per second through `urls` for `seconds`, and every answer."""
    support = importlib.import_module("tests.support.fleet")
    started = time.perf_counter()
    async with support.Load(fleet, clients, urls=urls) as load:
        await asyncio.sleep(seconds)  # a measuring window, not a wait for something to happen
    served = sum(a.status == 200 for a in load.answers)
    return served / (time.perf_counter() - started), load.answers


def p99(answers: list[Any]) -> float:
    waits = sorted(a.waited for a in answers)
    return waits[int(len(waits) * 0.99)] if waits else 0.0


def full_service(answers: list[Any], killed_at: float, healthy_p99: float) -> float:
    """Seconds from the kill until the last request the loss slowed (past SLOW x the healthy p99) or
    failed was answered: after it, the fleet serves as before. 0 if it slowed none."""
    hit = [
        a.ended
        for a in answers
        if a.ended >= killed_at and (a.status != 200 or a.waited > SLOW * healthy_p99)
    ]
    return max(hit) - killed_at if hit else 0.0


def error_rate(answers: list[Any]) -> str:
    failed = Counter(f"{a.status} {a.code}" for a in answers if a.status != 200)
    total = sum(failed.values())
    named = ", ".join(f"{count} {what}" for what, count in sorted(failed.items()))
    # what the errors said, ids and all (a few): why they failed, for whoever reads the table
    said = sorted({a.message for a in answers if a.status != 200 and a.message})[:3]
    quoted = "".join(f"; “{message}”" for message in said)
    return (
        f"{total}/{len(answers)} ({total / max(1, len(answers)):.1%}){': ' + named if named else ''}{quoted}"
    )


async def agent_loss(fleet: Any, clients: int, healthy_p99: float) -> dict[str, str]:
    support = importlib.import_module("tests.support.fleet")
    events = importlib.import_module("tests.support.fleet_events")
    victim = fleet.agents[1]
    accelerator = support.accelerator_of(victim)
    since = await events.last_sequence(fleet.connection, subjects.EVENTS_STREAM) + 1
    requests_since = await events.last_sequence(fleet.connection, subjects.REQUESTS_STREAM) + 1
    async with support.Load(fleet, clients) as load:
        await load.answered(clients * 4)
        killed_at = time.time()
        victim.kill()
        found = await events.stored_until(
            fleet.connection,
            subjects.EVENTS_STREAM,
            since,
            lambda e: isinstance(e.event, s.ResidencyReconciled) and e.event.accelerator_id == accelerator,
        )
        await load.answered(len(load.answers) + clients * 4)
    held = {  # the requests granted a lease on the lost node's accelerator
        e.event.request_id
        for e in await events.stored_events(fleet.connection, subjects.EVENTS_STREAM, since)
        if isinstance(e.event, s.LeaseGranted) and e.event.accelerator_id == accelerator
    }
    await events.completions(
        fleet.connection, requests_since, {a.request_id for a in load.answers if a.status == 200}
    )
    moved = {  # ... and completed on the other copy
        e.event.request_id
        for e in await events.stored_events(fleet.connection, subjects.REQUESTS_STREAM, requests_since)
        if isinstance(e.event, RequestCompleted) and e.event.accelerator_id != accelerator
    } & held
    first = min(
        (a.ended for a in load.answers if a.request_id in moved and a.ended >= killed_at), default=None
    )
    after = [a for a in load.answers if a.ended >= killed_at]
    return {
        "leases released": f"{found[-1].stored - killed_at:.2f}",
        "first held request served by the other copy": f"{first - killed_at:.2f}" if first else "none held",
        "full service": f"{full_service(load.answers, killed_at, healthy_p99):.2f}",
        "error rate after the kill": error_rate(after),
    }


async def led_by(fleet: Any, server: str) -> list[str]:
    """The streams other than MF_EVENTS that `server` leads: each is leaderless after its loss too,
    and a request writes to the client-limit ones (MF_LIMITS_RATE, MF_LIMITS_CONC) before placement."""
    js = fleet.connection.client.jetstream()
    led = []
    for stream in (
        subjects.TELEMETRY_STREAM,
        subjects.REQUESTS_STREAM,
        subjects.LIMITS_RATE_STREAM,
        subjects.LIMITS_CONCURRENCY_STREAM,
    ):
        cluster = (await js.stream_info(stream)).cluster
        if cluster is not None and cluster.leader == server:
            led.append(stream)
    return led


async def leader_loss(fleet: Any, clients: int, healthy_p99: float) -> dict[str, str]:
    support = importlib.import_module("tests.support.fleet")
    events = importlib.import_module("tests.support.fleet_events")
    info = await fleet.connection.client.jetstream().stream_info(subjects.EVENTS_STREAM)
    since = info.state.last_seq + 1
    # The election's advisory, heard on a server that stays (one on the lost server could miss it).
    survivor = next(m for m in fleet.cluster.members if m.name != info.cluster.leader)
    watcher = await connect(survivor.url, "bench-fleet-advisories", first_connect_s=10)
    elected = await watcher.client.subscribe(
        f"$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.{subjects.EVENTS_STREAM}"
    )
    also_led = await led_by(fleet, info.cluster.leader)
    requests_since = await events.last_sequence(fleet.connection, subjects.REQUESTS_STREAM) + 1
    async with support.Load(fleet, clients) as load:
        await load.answered(clients * 4)
        killed_at = time.time()
        fleet.cluster.kill(info.cluster.leader)
        try:
            await elected.next_msg(timeout=30)
            new_leader = f"{time.time() - killed_at:.2f}"
        except TimeoutError:
            new_leader = "no advisory seen"
        await watcher.close()
        await load.answered(len(load.answers) + clients * 8)
    in_flight = {a.request_id for a in load.answers if a.started <= killed_at <= a.ended}
    ended = await events.lease_ends(fleet.connection, since, in_flight)
    after = [a for a in load.answers if a.ended >= killed_at]
    served = {a.request_id for a in after if a.status == 200}
    await events.completions(fleet.connection, requests_since, served)
    completed = {
        e.event.request_id: e.event
        for e in await events.stored_events(fleet.connection, subjects.REQUESTS_STREAM, requests_since)
        if isinstance(e.event, RequestCompleted) and e.event.request_id in served
    }
    # Slowed outside placement: waited for a client-limit message or MF_REQUESTS, not for a lease.
    elsewhere = {
        request_id
        for request_id, done in completed.items()
        if (done.latency.total_ms - done.latency.scheduling_ms) / 1000 > SLOW * healthy_p99
    }
    placement_only = [a for a in load.answers if a.request_id not in elsewhere]
    in_placement = [  # slowed waiting for a lease (or a standby slot)
        done for done in completed.values() if done.latency.scheduling_ms / 1000 > SLOW * healthy_p99
    ]
    ends = {a.request_id: a.ended - killed_at for a in after}
    last_in_placement = max((ends[done.request_id] for done in in_placement), default=0.0)
    return {
        "streams the lost server also led (each elects too)": ", ".join(also_led) or "none",
        "new leader": new_leader,
        "leases of requests in flight released": f"{max(ended.values(), default=killed_at) - killed_at:.2f}",
        "full service": f"{full_service(load.answers, killed_at, healthy_p99):.2f}",
        "full service, leaving out requests slowed outside placement (client limits, MF_REQUESTS)": (
            f"{full_service(placement_only, killed_at, healthy_p99):.2f} ({len(elsewhere)} left out)"
        ),
        "requests slowed waiting for a lease (of them under a standby lease), the last answered at": (
            f"{len(in_placement)} ({sum(1 for done in in_placement if done.standby_lease_id)}),"
            f" {last_in_placement:.2f}"
        ),
        "requests after the kill served under a standby lease": (
            f"{sum(1 for done in completed.values() if done.standby_lease_id)}/{len(after)}"
        ),
        "error rate after the kill": error_rate(after),
    }


async def main(seconds: float, clients: int) -> None:
    home, root = minilm_home("mf-bench-fleet-")
    try:
        await _run(home, root, seconds, clients)
    finally:
        shutil.rmtree(home, ignore_errors=True)


async def _run(home: Path, root: Path, seconds: float, clients: int) -> None:
    support = importlib.import_module("tests.support.fleet")
    rates: dict[tuple[int, int], float] = {}
    healthy: list[Any] = []
    async with support.running_fleet(home / "one-agent", root, gateways=2, agents=1, pin=pinned) as fleet:
        for gateways in (1, 2):
            rates[gateways, 1], answers = await throughput(fleet, fleet.urls[:gateways], clients, seconds)
            healthy += answers
    async with support.running_fleet(home / "two-agents", root, gateways=2, agents=2, pin=pinned) as fleet:
        for gateways in (1, 2):
            rates[gateways, 2], answers = await throughput(fleet, fleet.urls[:gateways], clients, seconds)
            healthy += answers
        healthy_p99 = p99(answers)
        lost_agent = await agent_loss(fleet, clients, healthy_p99)
        await support.every_copy_back(fleet)
        lost_leader = await leader_loss(fleet, clients, healthy_p99)
    print(f"bench/fleet.py, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC: {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f}; {clients} clients, {seconds:.0f} s a phase; heartbeat {support.HEARTBEAT_S:.0f} s")  # fmt: skip
    print("\n| gateways x agents | served/s | ratio to 1 x 1 |\n|---|---|---|")
    for (gateways, agents), rate in sorted(rates.items(), key=lambda item: (item[0][1], item[0][0])):
        print(f"| {gateways} x {agents} | {rate:.1f} | {rate / rates[1, 1]:.2f} |")
    print(f"\nhealthy error rate: {error_rate(healthy)}; healthy p99 (2 x 2): {healthy_p99 * 1000:.0f} ms")
    bound = 2 * support.HEARTBEAT_S
    print(f"\n| agent SIGKILL (target <= {bound:.0f} s) | seconds |\n|---|---|")
    for name, value in lost_agent.items():
        print(f"| {name} | {value} |")
    print("\n| MF_EVENTS leader's server SIGKILL (target <= 5 s) | seconds |\n|---|---|")
    for name, value in lost_leader.items():
        print(f"| {name} | {value} |")


if __name__ == "__main__":
    cli = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    cli.add_argument("--seconds", type=float, default=10.0, help="each throughput phase")
    cli.add_argument("--clients", type=int, default=16)
    given = cli.parse_args()
    asyncio.run(main(given.seconds, given.clients))
