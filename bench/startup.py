"""Gateway start-up against a long history: a full fold of MF_EVENTS against a start from a snapshot.

Starts its own nats-server, fills MF_EVENTS and MF_REQUESTS with the hot-path mix (each request's
lease and release on its accelerator, its acceptance and completion; `projections.scenario`) until
MF_EVENTS holds `--events` events, then times, in this process:

1. the raw limit: reading every MF_EVENTS message through one ordered consumer, decoding nothing;
2. the live view's start with no snapshot: it folds every event (what a replica's start waited
   for before snapshots), or gives up after 120 s;
3. the same full fold without a time limit (`replay`), then storing the first snapshot of it
   (`SnapshotWriter.write`: its replay folds every event once more; a one-off, in the background
   of a running gateway);
4. `--tail` more events (the most a snapshot lags by default), then a gateway replica's whole
   start (`gateway.process.start_replica`, to ready) from the snapshot.

    .venv/bin/python -m bench.startup [--events 1000000] [--tail 5000]

The target (issue 20): start-up of a gateway <= 3 s with 10 million events.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from nats.aio.client import Client
from nats.js.api import DeliverPolicy

from eventstore.connection import connect
from eventstore.provision import provision
from eventstore.store import prepare
from gateway.process import start_replica
from gateway.state.live import LiveState
from gateway.state.snapshots import EVERY, SnapshotWriter, replay
from modelforge.devstack.nats_server import start_nats
from modelforge.devstack.processes import stop_pid
from projections.scenario import control_plane, traffic
from streams import subjects
from streams.envelope import SYSTEM

FLUSH_EVERY = 20_000  # messages between flushes while filling (bounds what the client buffers)


def hot_path(run: str, first: bool) -> Iterator[tuple[str, bytes, dict[str, str]]]:
    """Encoded messages: the control plane (once), then requests without end."""
    items = traffic(run, 1 << 62)
    for aggregate, ident, event in itertools.chain(control_plane(run) if first else [], items):
        if aggregate is None:
            (msg,) = prepare([event], None, event.request_id, SYSTEM, None, None, ident)  # type: ignore[attr-defined]
        else:
            (msg,) = prepare([event], aggregate, ident, SYSTEM, None, None)
        yield msg.subject, msg.data, msg.headers


async def fill(client: Client, messages: Iterator[tuple[str, bytes, dict[str, str]]], events: int) -> int:
    """Publish until `events` more MF_EVENTS messages are stored; returns MF_EVENTS' last sequence.
    Core publishes keep the order; the last of each stream goes acknowledged, so once its ack is
    back the server has stored everything sent before it."""
    js = client.jetstream()
    sent = 0
    for subject, data, headers in messages:
        is_event = subject.startswith(subjects.EVENTS_PREFIX)
        if is_event and sent + 1 == events:
            await js.publish(subject, data, headers=headers, timeout=120)
            break
        await client.publish(subject, data, headers=headers)
        sent += is_event
        if sent % FLUSH_EVERY == 0 and is_event:
            await client.flush(timeout=120)
    await client.flush(timeout=120)
    return (await js.stream_info(subjects.EVENTS_STREAM)).state.last_seq


async def raw_read(client: Client, last: int) -> float:
    """Seconds to receive every MF_EVENTS message through one ordered consumer, decoding nothing."""
    js = client.jetstream()
    started = time.perf_counter()
    sub = await js.subscribe(
        f"{subjects.EVENTS_PREFIX}.>",
        stream=subjects.EVENTS_STREAM,
        ordered_consumer=True,
        deliver_policy=DeliverPolicy.ALL,
        pending_msgs_limit=-1,
        pending_bytes_limit=-1,
    )
    try:
        async for msg in sub.messages:
            if msg.metadata.sequence.stream >= last:
                break
    finally:
        await sub.unsubscribe()
    return time.perf_counter() - started


async def replica_start(url: str, name: str) -> float:
    """Seconds for a gateway replica to be ready (it must hold every event stored before it)."""
    started = time.perf_counter()
    replica = await start_replica(name, url)
    elapsed = time.perf_counter() - started
    await replica.close()
    return elapsed


def row(label: str, seconds: float, raw: float) -> None:
    print(f"{label:<62}{seconds:>9.2f}{seconds / raw:>12.2f}", flush=True)


def stream_mib(path: str) -> float:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file()) / (1 << 20)


async def main(events: int, tail: int) -> None:
    home = Path(tempfile.mkdtemp(prefix="mf-startup-"))
    os.chmod(home, 0o755)
    nats = start_nats(home)
    conn = await connect(nats.url, "bench-startup")
    try:
        await provision(conn.client)
        messages = hot_path("s", first=True)
        started = time.perf_counter()
        last = await fill(conn.client, messages, events)
        filled = time.perf_counter() - started
        info = await conn.client.jetstream().stream_info(subjects.REQUESTS_STREAM)
        print(
            f"filled MF_EVENTS to sequence {last:,} and MF_REQUESTS to {info.state.last_seq:,} in "
            f"{filled:.0f} s; store {stream_mib(nats.store_dir):,.0f} MiB"
        )
        raw = await raw_read(conn.client, last)
        print(f"{'measurement':<62}{'seconds':>9}{'÷ raw read':>12}")
        row(f"raw read of {last:,} events (ordered consumer, no decode)", raw, raw)
        started, view = time.perf_counter(), LiveState()
        try:  # what a replica's start waited for, before snapshots (it gives up after 120 s)
            await view.start(conn.client)
            row("live view start, full fold (no snapshot)", time.perf_counter() - started, raw)
        except RuntimeError as error:
            print(
                f"live view start, full fold: not ready after {time.perf_counter() - started:.0f} s: {error}"
            )
        finally:
            await view.stop()
        started = time.perf_counter()
        view, _ = await replay(conn.client, None, last)
        row("the full fold alone (replay, no time limit)", time.perf_counter() - started, raw)
        started = time.perf_counter()
        if not await SnapshotWriter(conn.client, view).write():
            raise RuntimeError("the snapshot was not stored (see the log)")
        row("first snapshot stored (its replay folds them all; one-off)", time.perf_counter() - started, raw)
        last = await fill(conn.client, messages, tail)
        resumed = await replica_start(nats.url, "bench-resumed")
        row(f"replica start from the snapshot + {tail:,} events after it", resumed, raw)
        print("target: <= 3 s at 10 M events")
    finally:
        await conn.close()
        stop_pid(nats.pid)
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=1_000_000, help="MF_EVENTS events to fill")
    parser.add_argument("--tail", type=int, default=EVERY, help="events after the snapshot")
    args = parser.parse_args()
    asyncio.run(main(args.events, args.tail))
