"""Projection throughput: the projector and `replay` against raw COPY into the same database.

Starts its own nats-server and PostgreSQL in a temporary folder, publishes N synthetic events of
the hot-path mix (projections.scenario: per request RequestAccepted, LeaseGranted, LeaseReleased,
RequestCompleted, plus failures, rejections and pressure changes), then measures, in one run:
  raw COPY   - the audit rows of those events COPYed into a bare table (the database's limit)
  projector  - `modelforge projector` catching up from checkpoint 0 to the end, every table and the
               audit log, exactly once (CPU: the projector's processes with this one's)
  replay     - the same events rebuilt into a fresh schema, with its digest
    .venv/bin/python -m bench.projection [--events 1000000]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import resource
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import psycopg

from eventstore.connection import connect
from eventstore.provision import provision
from eventstore.store import prepare
from modelforge.devstack.nats_server import start_nats
from modelforge.devstack.postgres import start_postgres, stop_postgres
from modelforge.devstack.processes import stop_pid
from projections import source
from projections.replay import replay
from projections.scenario import control_plane, traffic
from projections.wait import ProjectionWaiter
from streams.envelope import SYSTEM

_TICK = os.sysconf("SC_CLK_TCK")


class Cpu(NamedTuple):
    python: float
    postgres: float
    nats: float


def _proc_cpu(pid: int, reaped: bool) -> tuple[float, int]:
    """(CPU seconds of `pid`, plus its reaped children's if `reaped`; its parent pid)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return 0.0, 0
    ticks = int(fields[11]) + int(fields[12]) + (int(fields[13]) + int(fields[14]) if reaped else 0)
    return ticks / _TICK, int(fields[1])


def cpu(postgres_pid: int, nats_pid: int) -> Cpu:
    """CPU seconds so far: this process and its exited children (the projector and its workers);
    PostgreSQL's postmaster, its live and its exited backends."""
    pg = _proc_cpu(postgres_pid, True)[0]
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            seconds, parent = _proc_cpu(int(entry), False)
            if parent == postgres_pid:
                pg += seconds
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    python = time.process_time() + children.ru_utime + children.ru_stime
    return Cpu(python, pg, _proc_cpu(nats_pid, True)[0])


async def run_projector(database_url: str, nats_url: str, want: dict[str, int]) -> None:
    """`modelforge projector` as operators run it (one worker process per stream), from checkpoint 0
    until it has applied `want`; process start-up included."""
    waiter = await ProjectionWaiter.open(database_url)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "modelforge.cli",
        "projector",
        "--no-telemetry",
        env={**os.environ, "DATABASE_URL": database_url, "NATS_URL": nats_url},
    )
    try:
        for stream, seq in want.items():
            if not await waiter.wait(seq, stream, timeout=3600):
                raise SystemExit(f"the projector did not reach {stream} {seq} within an hour")
    finally:
        process.send_signal(signal.SIGTERM)
        await process.wait()
        await waiter.close()


def build(count: int, carried: bool = False) -> list[tuple[str, bytes, dict[str, str]]]:
    """`count` events: the control plane, then traffic (`carried`: `projections.scenario.traffic`'s)."""
    items = control_plane("b")
    out = []
    for aggregate, ident, event in [*items, *traffic("b", count, carried=carried)]:
        if aggregate is None:
            request_id: str = event.request_id  # type: ignore[attr-defined]
            (msg,) = prepare([event], None, request_id, SYSTEM, None, None, ident)
        else:
            (msg,) = prepare([event], aggregate, ident, SYSTEM, None, None)
        out.append((msg.subject, msg.data, msg.headers))
        if len(out) >= count:
            break
    return out


async def main(count: int) -> None:
    home = Path(tempfile.mkdtemp(prefix="mf-bench-"))
    os.chmod(home, 0o755)
    nats = start_nats(home)
    pg = start_postgres(home, durable=False)
    conn = await connect(nats.url, "bench-projection")
    try:
        await provision(conn.client)
        t = time.perf_counter()
        messages = build(count)
        print(f"built {len(messages):,} events in {time.perf_counter() - t:.1f} s")
        t = time.perf_counter()
        # Core publishes keep the order; the last message of each stream goes acked, so once both
        # acks are back the server has stored everything sent before them.
        last_of = {
            prefix: max(i for i, m in enumerate(messages) if m[0].startswith(prefix))
            for prefix in ("mf.evt", "mf.req")
        }
        js = conn.client.jetstream()
        for index, (subject, data, headers) in enumerate(messages):
            if index not in last_of.values():
                await conn.client.publish(subject, data, headers=headers)
        want = {}
        for stream, prefix in (("MF_EVENTS", "mf.evt"), ("MF_REQUESTS", "mf.req")):
            subject, data, headers = messages[last_of[prefix]]
            want[stream] = (await js.publish(subject, data, headers=headers, timeout=60)).seq
        print(f"published in {time.perf_counter() - t:.1f} s: {want}")

        # raw COPY: the audit rows themselves, into a bare table shaped like mf.audit_log (json
        # headers and payload, primary key only), one COPY per 20k rows
        from projections.audit import audit_line
        from projections.facts import fact_from

        lines = [
            audit_line(
                fact_from(
                    "MF_EVENTS",
                    source.Delivery(
                        i + 1,
                        s,
                        b"NATS/1.0\r\n" + b"".join(f"{k}: {v}\r\n".encode() for k, v in h.items()),
                        d,
                        time.time_ns(),
                    ),
                )
            )
            for i, (s, d, h) in enumerate(messages)
        ]
        async with await psycopg.AsyncConnection.connect(pg.url, autocommit=True) as db:
            await db.execute(
                "CREATE TABLE raw_copy (stream text, seq bigint, subject text, event_id text,"
                " event_type text, schema_version int, aggregate_type text, aggregate_id text,"
                " occurred_at timestamptz, stored_at timestamptz, actor text, correlation_id text,"
                " causation_id text, headers json, payload json, decoded boolean, unknown_reason text,"
                " PRIMARY KEY (stream, seq))"
            )
            t, before = time.perf_counter(), cpu(pg.pid, nats.pid)
            for start in range(0, len(lines), 20_000):
                async with db.transaction(), db.cursor().copy("COPY raw_copy FROM STDIN") as copy:
                    await copy.write("\n".join(lines[start : start + 20_000]) + "\n")
            raw_rate = len(lines) / (time.perf_counter() - t)
            raw_cpu = _spent(before, cpu(pg.pid, nats.pid), len(lines))
            # Else autovacuum visits its million fresh rows while the projector runs, on the same cores.
            await db.execute("DROP TABLE raw_copy")
        # The projector and replay below are measured as they run in production: without a
        # million published messages alive in this process for the garbage collector to walk.
        del lines, messages
        gc.collect()

        total = sum(want.values())
        t, before = time.perf_counter(), cpu(pg.pid, nats.pid)
        await run_projector(pg.url, nats.url, want)
        projector_s = time.perf_counter() - t
        projector_cpu = _spent(before, cpu(pg.pid, nats.pid), total)

        before = cpu(pg.pid, nats.pid)
        result = await replay(pg.url, nats.url, verify=True, progress=True)
        replay_cpu = _spent(before, cpu(pg.pid, nats.pid), result.events)
        print()
        print(
            f"{'path':<12}{'events/s':>12}{'seconds':>10}{'vs raw COPY':>14}   CPU us/event: python postgres nats"
        )
        for name, rate, seconds, spent in (
            ("raw COPY", raw_rate, count / raw_rate, raw_cpu),
            ("projector", total / projector_s, projector_s, projector_cpu),
            ("replay", result.events / result.seconds, result.seconds, replay_cpu),
        ):
            print(
                f"{name:<12}{rate:>12,.0f}{seconds:>10.1f}{rate / raw_rate:>14.2f}"
                f"{spent.python:>24.1f}{spent.postgres:>9.1f}{spent.nats:>5.1f}"
            )
        print(
            f"replay digest {result.digest} ({'= live' if result.live_digest == result.digest else 'DIFFERS from live'})"
        )
    finally:
        await conn.close()
        stop_postgres(pg)
        stop_pid(nats.pid)


def _spent(before: Cpu, after: Cpu, events: int) -> Cpu:
    return Cpu(*((b - a) * 1e6 / max(events, 1) for a, b in zip(before, after, strict=True)))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=1_000_000)
    asyncio.run(main(parser.parse_args().events))
