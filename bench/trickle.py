"""Projection cost at low load: CPU per request of the projector and PostgreSQL, following live.

`bench/projection.py` measures catch-up, where batches are large. A quiet system is the other end:
each request's events (RequestAccepted, LeaseGranted, LeaseReleased, RequestCompleted) arrive
alone, and a projector that commits every arrival on its own pays a transaction per event. This
starts its own nats-server and PostgreSQL, starts `modelforge projector` as operators run it, then
publishes the hot-path mix at a steady rate (requests per second, as the gateway would) and reports
the CPU that the projector's processes and PostgreSQL spent per request, and how far behind the
read model was (the last event's publish to its commit).

    .venv/bin/python -m bench.trickle [--rate 80] [--seconds 20] [--commit-interval-ms 50] [--durable]

PostgreSQL runs as the test clusters do (no fsync, no synchronous commit) unless `--durable`, which
runs it as `modelforge up` does.

The targets (issue 20): projector + PostgreSQL <= 0.5 ms of CPU per request at any load.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

from bench.projection import _proc_cpu, build
from eventstore.connection import connect
from eventstore.provision import provision
from modelforge.devstack.nats_server import start_nats
from modelforge.devstack.postgres import start_postgres, stop_postgres
from modelforge.devstack.processes import stop_pid
from projections.wait import ProjectionWaiter

EVENTS_PER_REQUEST = 4


def tree_cpu(root: int) -> float:
    """CPU seconds of `root` and every live descendant (a projector and its worker processes;
    PostgreSQL's postmaster and its backends), plus what their reaped children spent."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            parents[int(entry)] = _proc_cpu(int(entry), False)[1]
    members, frontier = {root}, [root]
    while frontier:
        pid = frontier.pop()
        for child, parent in parents.items():
            if parent == pid and child not in members:
                members.add(child)
                frontier.append(child)
    return sum(_proc_cpu(pid, True)[0] for pid in members)


async def main(rate: float, seconds: float, commit_interval_ms: float | None, durable: bool = False) -> None:
    home = Path(tempfile.mkdtemp(prefix="mf-trickle-"))
    os.chmod(home, 0o755)
    nats = start_nats(home)
    pg = start_postgres(home, durable=durable)
    conn = await connect(nats.url, "bench-trickle")
    waiter = await ProjectionWaiter.open(pg.url)
    projector = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "modelforge.cli",
        "projector",
        "--no-telemetry",
        *([] if commit_interval_ms is None else ["--commit-interval-ms", str(commit_interval_ms)]),
        env={**os.environ, "DATABASE_URL": pg.url, "NATS_URL": nats.url},
    )
    try:
        await provision(conn.client)
        js = conn.client.jetstream()
        requests = int(rate * seconds)
        messages = build(requests * EVENTS_PER_REQUEST + 64)
        control = len(messages) - requests * EVENTS_PER_REQUEST
        last: dict[str, int] = {}
        for subject, data, headers in messages[:control]:
            stream = "MF_EVENTS" if subject.startswith("mf.evt") else "MF_REQUESTS"
            last[stream] = (await js.publish(subject, data, headers=headers)).seq
        for stream, seq in last.items():
            await waiter.wait(seq, stream, timeout=60)

        before = tree_cpu(projector.pid), tree_cpu(pg.pid)
        start = time.perf_counter()
        body = messages[control:]
        for n in range(requests):
            # Paced as a gateway at `rate` would append: each request's four events in turn.
            due = start + n / rate
            if (delay := due - time.perf_counter()) > 0:
                await asyncio.sleep(delay)
            for subject, data, headers in body[n * EVENTS_PER_REQUEST : (n + 1) * EVENTS_PER_REQUEST]:
                stream = "MF_EVENTS" if subject.startswith("mf.evt") else "MF_REQUESTS"
                last[stream] = (await js.publish(subject, data, headers=headers)).seq
        published = time.perf_counter()
        for stream, seq in last.items():
            await waiter.wait(seq, stream, timeout=60)
        behind_ms = (time.perf_counter() - published) * 1000
        spent = tree_cpu(projector.pid) - before[0], tree_cpu(pg.pid) - before[1]
        elapsed = published - start
        print(f"{requests} requests at {requests / elapsed:.1f} req/s for {elapsed:.1f} s")
        print(f"{'process':<12}{'CPU ms/request':>16}{'share of a core':>18}")
        for name, cpu_s in (("projector", spent[0]), ("postgres", spent[1]), ("both", sum(spent))):
            print(f"{name:<12}{cpu_s * 1000 / requests:>16.3f}{cpu_s / elapsed:>18.3f}")
        print(
            f"target: both <= 0.5 ms/request; read model caught up {behind_ms:.0f} ms after the last publish"
        )
    finally:
        projector.send_signal(signal.SIGTERM)
        await projector.wait()
        await waiter.close()
        await conn.close()
        stop_postgres(pg)
        stop_pid(nats.pid)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=float, default=80.0, help="requests per second")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--commit-interval-ms", type=float, help="the projector's (default: its own)")
    parser.add_argument("--durable", action="store_true", help="PostgreSQL as `modelforge up` runs it")
    args = parser.parse_args()
    asyncio.run(main(args.rate, args.seconds, args.commit_interval_ms, args.durable))
