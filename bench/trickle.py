"""Projection cost at low load: CPU per request of the projector and PostgreSQL, following live.

`bench/projection.py` measures catch-up, where batches are large. A quiet system is the other end:
each request's events (RequestAccepted, LeaseGranted, LeaseReleased, RequestCompleted) arrive
alone, and a projector that commits every arrival on its own pays a transaction per event. This
starts its own nats-server and PostgreSQL, starts `modelforge projector` as operators run it, then
publishes the hot-path mix at a steady rate (requests per second, as the gateway would) and reports
the CPU that the projector's processes and PostgreSQL spent per request, and how far behind the
read model was (the last event's publish to its commit).

    .venv/bin/python -m bench.trickle [--rate 80] [--seconds 20] [--commit-interval-ms 50] [--durable]
        [--by-process] [--standby]

`--standby` publishes each request as a warm one under a standby slot does (`docs/scheduler.md`):
one record, its outcome carrying its acceptance (it ended while its gateway held that:
docs/event-log.md, "A request's records"), with no lease events on MF_EVENTS.

`--rate 0` measures the idle floor: the same stack with nothing published for `--seconds`, in CPU
ms a second. CPU comes from schedstat (nanoseconds) where the kernel has it, else /proc's ticks.

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
STANDBY_EVENTS_PER_REQUEST = 1  # a warm request under a standby slot: its outcome, carrying its acceptance


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _label(pid: int) -> str:
    """What a process of the tree is: a projector worker by its stream, a PostgreSQL process by its
    title ("walwriter", "checkpointer", a backend as "backend"), else the supervisor / postmaster."""
    words = _cmdline(pid).split()
    if "--stream" in words:
        return "worker " + words[words.index("--stream") + 1]
    if words[:1] == ["postgres:"]:
        title = " ".join(words[1:])
        if "127.0.0.1(" in title or "[local]" in title:
            return "backend"
        return title.removesuffix("process").strip() or "postgres"
    return "postmaster" if words and words[0].endswith("postgres") else "supervisor"


def _on_cpu_s(pid: int) -> float | None:
    """CPU seconds of `pid`'s live threads from schedstat (nanoseconds; /proc's stat counts ticks of
    10 ms, too coarse for a quiet process over a few seconds); None when schedstat is missing."""
    total = 0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return total / 1e9


def tree_cpu(root: int) -> dict[str, float]:
    """CPU seconds of `root` and every live descendant (a projector and its worker processes;
    PostgreSQL's postmaster and its backends), plus what their reaped children spent, by `_label`."""
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
    spent: dict[str, float] = {}
    for pid in members:
        with_reaped, own_ticks = _proc_cpu(pid, True)[0], _proc_cpu(pid, False)[0]
        live = _on_cpu_s(pid)
        seconds = with_reaped if live is None else live + with_reaped - own_ticks
        label = _label(pid)
        spent[label] = spent.get(label, 0.0) + seconds
    return spent


def _delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {label: after.get(label, 0.0) - before.get(label, 0.0) for label in sorted({*after, *before})}


async def main(
    rate: float,
    seconds: float,
    commit_interval_ms: float | None,
    durable: bool = False,
    by_process: bool = False,
    standby: bool = False,
) -> None:
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
        messages = build(requests * EVENTS_PER_REQUEST + 64, carried=standby)
        control = len(messages) - requests * EVENTS_PER_REQUEST
        events_per_request = EVENTS_PER_REQUEST
        if standby:  # under a standby slot: a request's own events only, no lease on MF_EVENTS
            messages = messages[:control] + [m for m in messages[control:] if not m[0].startswith("mf.evt")]
            events_per_request = STANDBY_EVENTS_PER_REQUEST
        last: dict[str, int] = {}
        for subject, data, headers in messages[:control]:
            stream = "MF_EVENTS" if subject.startswith("mf.evt") else "MF_REQUESTS"
            last[stream] = (await js.publish(subject, data, headers=headers)).seq
        for stream, seq in last.items():
            await waiter.wait(seq, stream, timeout=60)

        before = tree_cpu(projector.pid), tree_cpu(pg.pid)
        start = time.perf_counter()
        body = messages[control:]
        if rate <= 0:  # the idle floor: nothing published, nothing asked
            await asyncio.sleep(seconds)
        for n in range(requests):
            # Paced as a gateway at `rate` would append: each request's events in turn.
            due = start + n / rate
            if (delay := due - time.perf_counter()) > 0:
                await asyncio.sleep(delay)
            for subject, data, headers in body[n * events_per_request : (n + 1) * events_per_request]:
                stream = "MF_EVENTS" if subject.startswith("mf.evt") else "MF_REQUESTS"
                last[stream] = (await js.publish(subject, data, headers=headers)).seq
        published = time.perf_counter()
        for stream, seq in last.items():
            await waiter.wait(seq, stream, timeout=60)
        behind_ms = (time.perf_counter() - published) * 1000
        spent = _delta(tree_cpu(projector.pid), before[0]), _delta(tree_cpu(pg.pid), before[1])
        elapsed = published - start
        totals = {"projector": sum(spent[0].values()), "postgres": sum(spent[1].values())}
        totals["both"] = totals["projector"] + totals["postgres"]
        rows: list[tuple[str, float]] = list(totals.items())
        if by_process:
            rows = [(f"  {label}", cpu_s) for part in spent for label, cpu_s in part.items()] + rows
        if requests:
            print(f"{requests} requests at {requests / elapsed:.1f} req/s for {elapsed:.1f} s")
        else:
            print(f"idle for {elapsed:.1f} s")
        print(f"{'process':<24}{'CPU ms/request':>16}{'CPU ms/s':>12}")
        for name, cpu_s in rows:
            per_request = f"{cpu_s * 1000 / requests:.3f}" if requests else "-"
            print(f"{name:<24}{per_request:>16}{cpu_s * 1000 / elapsed:>12.2f}")
        if requests:
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
    parser.add_argument(
        "--rate", type=float, default=80.0, help="requests per second (0: the idle floor, in CPU ms a second)"
    )
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--commit-interval-ms", type=float, help="the projector's (default: its own)")
    parser.add_argument("--durable", action="store_true", help="PostgreSQL as `modelforge up` runs it")
    parser.add_argument(
        "--by-process", action="store_true", help="each process's share (workers, walwriter...)"
    )
    parser.add_argument(
        "--standby",
        action="store_true",
        help="requests as under a standby slot: no lease events of their own",
    )
    args = parser.parse_args()
    asyncio.run(
        main(args.rate, args.seconds, args.commit_interval_ms, args.durable, args.by_process, args.standby)
    )
