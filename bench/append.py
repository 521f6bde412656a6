"""eventstore.append vs raw js.publish with the same headers, sequential and pipelined; then the
latency of one append by its number of events (more than one: an atomic batch); then why a
batch costs what it does (file-stream staging against memory-stream staging).

Starts its own nats-server (from the wheel) in a temporary folder; prints rates and ratios.
    .venv/bin/python -m bench.append [--count 5000] [--window 256]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from nats.aio.client import Client
from nats.js.api import StorageType, StreamConfig

from eventstore.connection import connect
from eventstore.provision import provision
from eventstore.replies import inbox_of
from eventstore.store import EventStore, ExpectedVersion, prepare
from modelforge.devstack.nats_server import start_nats
from modelforge.devstack.processes import stop_pid
from streams import subjects
from streams.envelope import SYSTEM, new_id
from streams.events.control import ClientDisabled
from streams.subjects import Aggregate


async def timed(count: int, window: int, op: Callable[[int], Awaitable[object]]) -> float:
    start = time.perf_counter()
    if window <= 1:
        for i in range(count):
            await op(i)
    else:
        for base in range(0, count, window):
            await asyncio.gather(*(op(i) for i in range(base, min(count, base + window))))
    return count / (time.perf_counter() - start)


async def batch_latency(store: EventStore, run: str, rounds: int = 200) -> None:
    """p50 of one append of n events to one aggregate (n > 1: an atomic batch), back to back.
    The group commit of gateway/serving/appends.py pays this once per accelerator round."""
    aggregate, version = f"{run}-batches", 0
    print(f"\n{'events per append':<18}{'p50 ms':>8}{'p99 ms':>8}{'x single':>10}")
    single = 0.0
    for n in (1, 2, 4, 12, 32):
        times = []
        for i in range(rounds):
            events = [ClientDisabled(client_id=aggregate, reason=f"{i}-{k}") for k in range(n)]
            started = time.perf_counter()
            version = await store.append(
                Aggregate.CLIENT, aggregate, events, version or ExpectedVersion.NO_STREAM
            )
            times.append((time.perf_counter() - started) * 1000)
        times.sort()
        p50, p99 = times[len(times) // 2], times[int(len(times) * 0.99) - 1]
        single = single or p50
        print(f"{n:<18}{p50:>8.3f}{p99:>8.3f}{p50 / single:>10.1f}")


async def staging_cost(client: Client, rounds: int = 200) -> None:
    """Where an atomic batch's fixed cost comes from: the same two-message batch and single publish
    on a scratch file stream and a scratch memory stream. A single-replica file stream stages each
    batch in a file store of its own, created and deleted per batch (nats-server's
    jetstream_batching.go); a memory stream stages it in memory."""
    js = client.jetstream()
    inbox = inbox_of(client)
    print(f"\n{'scratch stream':<16}{'batch of 2, p50 ms':>20}{'single, p50 ms':>16}")
    for storage in (StorageType.FILE, StorageType.MEMORY):
        name = f"BENCH_STAGING_{storage.value.upper()}"
        await js.add_stream(
            StreamConfig(name=name, subjects=[f"bench.{name}.>"], storage=storage, allow_atomic=True)
        )
        batch, single = [], []
        for i in range(rounds):
            subject, batch_id = f"bench.{name}.x", f"{name}-{i}"
            started = time.perf_counter()
            await client.publish(
                subject, b"1", headers={"Nats-Batch-Id": batch_id, "Nats-Batch-Sequence": "1"}
            )
            commit = {"Nats-Batch-Id": batch_id, "Nats-Batch-Sequence": "2", "Nats-Batch-Commit": "1"}
            await inbox.request(subject, b"2", 5.0, commit)
            batch.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            await inbox.request(subject, b"1", 5.0)
            single.append((time.perf_counter() - started) * 1000)
        await js.delete_stream(name)
        print(f"{storage.value:<16}{statistics.median(batch):>20.3f}{statistics.median(single):>16.3f}")


async def main(count: int, window: int) -> None:
    home = Path(tempfile.mkdtemp(prefix="mf-bench-"))
    os.chmod(home, 0o755)
    server = start_nats(home)
    conn = await connect(server.url, "bench-append")
    try:
        await provision(conn.client)
        js = conn.client.jetstream()
        store = EventStore(conn)
        run = new_id()[:8]

        def event(i: int) -> ClientDisabled:
            return ClientDisabled(client_id=f"{run}-{i}", reason="bench")

        def raw_messages(prefix: str) -> list[tuple[str, bytes, dict[str, str]]]:
            # Same subject shape, payload and headers as an append with an expected version,
            # built before the clock starts: the raw limit pays no encoding.
            built = []
            for i in range(count):
                aid = f"{prefix}-{i}"
                (out,) = prepare([event(i)], Aggregate.CLIENT, aid, SYSTEM, None, None)
                out.headers["Nats-Expected-Last-Subject-Sequence"] = "0"
                out.headers["Nats-Expected-Last-Subject-Sequence-Subject"] = subjects.aggregate_filter(
                    Aggregate.CLIENT, aid
                )
                built.append((out.subject, out.data, out.headers))
            return built

        async def raw(messages: list[tuple[str, bytes, dict[str, str]]], i: int) -> None:
            subject, data, headers = messages[i]
            await js.publish(subject, data, headers=headers)

        async def append(prefix: str, i: int) -> None:
            await store.append(Aggregate.CLIENT, f"{prefix}-{i}", [event(i)], ExpectedVersion.NO_STREAM)

        await timed(500, 1, lambda i: append(f"{run}w", i))  # warm-up
        rows = []
        for label, w in (("sequential", 1), (f"pipelined x{window}", window)):
            # Interleave raw and append runs twice and keep the best of each, to damp noise.
            raw_rates, app_rates = [], []
            for rep in range(2):
                messages = raw_messages(f"{run}r{label[0]}{rep}")
                raw_rates.append(await timed(count, w, lambda i, m=messages: raw(m, i)))
                app_rates.append(await timed(count, w, lambda i, p=f"{run}a{label[0]}{rep}": append(p, i)))
            rows.append((label, max(raw_rates), max(app_rates)))
        print(f"{'mode':<16}{'raw js.publish/s':>18}{'append/s':>12}{'ratio':>8}")
        for label, raw_rate, app_rate in rows:
            print(f"{label:<16}{raw_rate:>18,.0f}{app_rate:>12,.0f}{app_rate / raw_rate:>8.2f}")
        print("target: ratio >= 0.85 sequential")
        await batch_latency(store, run)
        await staging_cost(conn.client)
    finally:
        await conn.close()
        stop_pid(server.pid)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=5000)
    parser.add_argument("--window", type=int, default=256)
    args = parser.parse_args()
    asyncio.run(main(args.count, args.window))
