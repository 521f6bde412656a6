"""Projection throughput: the projector and `replay` against raw COPY into the same database.

Starts its own nats-server and PostgreSQL in a temporary folder, publishes N synthetic events of
the hot-path mix (projections.scenario: per request RequestAccepted, LeaseGranted, LeaseReleased,
RequestCompleted, plus failures, rejections and pressure changes), then measures, in one run:
  raw COPY   - the audit rows of those events COPYed into a bare table (the database's limit)
  projector  - catch-up from checkpoint 0 to the end, every table and the audit log, exactly once
  replay     - the same events rebuilt into a fresh schema, with its digest
    .venv/bin/python -m bench.projection [--events 1000000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

import psycopg

from eventstore.connection import connect
from eventstore.provision import provision
from eventstore.store import prepare
from modelforge.devstack.nats_server import start_nats
from modelforge.devstack.postgres import start_postgres, stop_postgres
from modelforge.devstack.processes import stop_pid
from projections import projector, source
from projections.replay import replay
from projections.scenario import control_plane, traffic
from streams.envelope import SYSTEM


def build(count: int) -> list[tuple[str, bytes, dict[str, str]]]:
    items = control_plane("b")
    out = []
    for aggregate, ident, event in [*items, *traffic("b", count // 4 + 1)]:
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
        from projections.facts import fact_from
        from projections.writer import audit_line

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
            t = time.perf_counter()
            for start in range(0, len(lines), 20_000):
                async with db.transaction(), db.cursor().copy("COPY raw_copy FROM STDIN") as copy:
                    await copy.write("\n".join(lines[start : start + 20_000]) + "\n")
            raw_rate = len(lines) / (time.perf_counter() - t)
        del lines

        stop = asyncio.Event()
        total = sum(want.values())

        def seen(done: dict[str, int]) -> None:
            if all(done.get(s, 0) >= q for s, q in want.items()):
                stop.set()

        t = time.perf_counter()
        await projector.run(pg.url, nats.url, stop=stop, on_batch=seen, telemetry=False)
        projector_s = time.perf_counter() - t

        result = await replay(pg.url, nats.url, verify=True, progress=True)
        print()
        print(f"{'path':<12}{'events/s':>12}{'seconds':>10}{'vs raw COPY':>14}")
        for name, rate, seconds in (
            ("raw COPY", raw_rate, count / raw_rate),
            ("projector", total / projector_s, projector_s),
            ("replay", result.events / result.seconds, result.seconds),
        ):
            print(f"{name:<12}{rate:>12,.0f}{seconds:>10.1f}{rate / raw_rate:>14.2f}")
        print(
            f"replay digest {result.digest} ({'= live' if result.live_digest == result.digest else 'DIFFERS from live'})"
        )
    finally:
        await conn.close()
        stop_postgres(pg)
        stop_pid(nats.pid)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=1_000_000)
    asyncio.run(main(parser.parse_args().events))
