"""Gateway start-up against a long history: a replica's start from a snapshot, at millions of events.

Starts its own nats-server and fills MF_EVENTS and MF_REQUESTS with the hot-path mix (each
request's lease and release on its accelerator, its acceptance and completion;
`projections.scenario`) until MF_EVENTS holds `--events` events: many publishes in flight, one
acknowledgement per stream per CHUNK messages (`fill`). As it sends them it folds the events into a
live view, at the sequences the stream gives them, and stores that view as the first snapshot: what
a gateway that followed the log would have stored, without folding 10 M events once more. Then it
times a gateway replica's whole start (`gateway.process.start_replica`, to ready) from that
snapshot, and again after `--tail` more events (the most a snapshot lags by default).

`--compare` also times what a start cost before snapshots (a raw read of MF_EVENTS, and the live
view's start with a full fold, which gives up after 120 s), and stores the first snapshot as a
gateway does, only once a replay of the whole log agrees with the fill's fold (at small sizes: it
shows that fold equals the log's). `--home DIR` keeps the store; run again, it measures it as it is.

    nice -n 10 .venv/bin/python -m bench.startup [--events 1000000] [--tail 5000] [--compare] [--home DIR]

The target (issue 20): start-up of a gateway <= 3 s with 10 million events.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import itertools
import os
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import DeliverPolicy

from eventstore.connection import connect
from eventstore.provision import provision
from eventstore.records import record_from
from eventstore.store import prepare
from gateway.process import start_replica
from gateway.state.live import LiveState
from gateway.state.snapshot import capture, encode_record, record_of
from gateway.state.snapshots import EVERY, KEY, SnapshotWriter, read_snapshot
from modelforge.devstack.nats_server import start_nats
from modelforge.devstack.processes import stop_pid
from projections.scenario import Item, control_plane, traffic
from streams import subjects
from streams.envelope import H_MSG_ID, SYSTEM

CHUNK = 2_000  # messages published between two that ask for an acknowledgement
WINDOW = 16  # chunks in flight, unacknowledged
PROGRESS = 1_000_000  # events between two progress lines
STREAMS = (subjects.EVENTS_STREAM, subjects.REQUESTS_STREAM)
Message = tuple[str, bytes, dict[str, str]]


def hot_path(run: str, first: bool) -> Iterator[Message]:
    """Encoded messages: the control plane (once), then requests without end."""
    return encoded(itertools.chain(control_plane(run) if first else [], traffic(run, 1 << 62)))


def encoded(items: Iterable[Item]) -> Iterator[Message]:
    """Each item as the message an append would publish (subject, data, headers)."""
    for aggregate, ident, event in items:
        if aggregate is None:
            (msg,) = prepare([event], None, event.request_id, SYSTEM, None, None, ident)  # type: ignore[attr-defined]
        else:
            (msg,) = prepare([event], aggregate, ident, SYSTEM, None, None)
        yield msg.subject, msg.data, msg.headers


class Acks:
    """Acknowledgements of the publishes that asked for one, on one inbox, in order of sending."""

    def __init__(self, client: Client) -> None:
        self.client, self.inbox = client, client.new_inbox()
        self.waiting: dict[str, asyncio.Future[bytes]] = {}
        self.sent = 0

    async def open(self) -> None:
        await self.client.subscribe(f"{self.inbox}.*", cb=self._on_ack)

    async def _on_ack(self, msg: Msg) -> None:
        future = self.waiting.pop(msg.subject, None)
        if future is not None and not future.done():
            future.set_result(msg.data)

    def reply(self) -> tuple[str, asyncio.Future[bytes]]:
        self.sent += 1
        subject = f"{self.inbox}.{self.sent}"
        self.waiting[subject] = future = asyncio.get_running_loop().create_future()
        return subject, future


async def _stored(future: asyncio.Future[bytes]) -> None:
    answer = msgspec.json.decode(await asyncio.wait_for(future, 120))
    if "error" in answer:
        raise RuntimeError(f"a publish was refused: {answer['error']}")


def _chunk(messages: Iterator[Message], events: int) -> list[tuple[str, Message]]:
    """The next CHUNK messages, each with its stream, stopping at the `events`-th MF_EVENTS one."""
    chunk = []
    for message in messages:
        is_event = message[0].startswith(subjects.EVENTS_PREFIX)
        chunk.append((subjects.EVENTS_STREAM if is_event else subjects.REQUESTS_STREAM, message))
        events -= is_event
        if events == 0 or len(chunk) == CHUNK:
            break
    return chunk


async def fill(
    client: Client, messages: Iterator[Message], events: int, view: LiveState | None = None
) -> int:
    """Publish until `events` more MF_EVENTS messages are stored; returns MF_EVENTS' last sequence.
    Many publishes in flight and no round trip per event: messages go in chunks of CHUNK, each a
    plain publish but the last of each stream in the chunk, which asks for an acknowledgement (a
    stream stores what one connection sends in order, so that one's ack says all before it are
    stored); at most WINDOW chunks unacknowledged. At the end the streams must hold what was sent
    (a message dropped without an answer would show there). `view`, if given, folds each event as
    sent, at the sequence the stream gives it (it stores them in the order sent, all of them)."""
    js, acks = client.jetstream(), Acks(client)
    await acks.open()
    before = {name: (await js.stream_info(name)).state.messages for name in STREAMS}
    sequence = (await js.stream_info(subjects.EVENTS_STREAM)).state.last_seq
    sent = dict.fromkeys(STREAMS, 0)
    in_flight: collections.deque[asyncio.Future[bytes]] = collections.deque()
    progress = PROGRESS
    while sent[subjects.EVENTS_STREAM] < events:
        chunk = _chunk(messages, events - sent[subjects.EVENTS_STREAM])
        last_of = {stream: index for index, (stream, _) in enumerate(chunk)}
        for index, (stream, (subject, data, headers)) in enumerate(chunk):
            reply = ""
            if last_of[stream] == index:
                reply, future = acks.reply()
                in_flight.append(future)
            await client.publish(subject, data, reply=reply, headers=headers)
            sent[stream] += 1
            if view is not None and stream == subjects.EVENTS_STREAM:
                sequence += 1
                view.apply(record_from(sequence, subject, headers, data))
        if sent[subjects.EVENTS_STREAM] >= progress:
            print(f"  {sent[subjects.EVENTS_STREAM]:,} events sent", flush=True)
            progress += PROGRESS
        while len(in_flight) > WINDOW * len(STREAMS):
            await _stored(in_flight.popleft())
    while in_flight:
        await _stored(in_flight.popleft())
    for name in STREAMS:
        stored = (await js.stream_info(name)).state.messages - before[name]
        if stored != sent[name]:
            raise RuntimeError(f"{name}: sent {sent[name]:,} messages but {stored:,} were stored")
    if view is not None:
        view.followed = view.applied  # (it holds exactly the events up to there: settled)
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


def row(label: str, seconds: float) -> None:
    print(f"{label:<66}{seconds:>9.2f}", flush=True)


def stream_mib(path: str) -> float:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file()) / (1 << 20)


async def full_fold_start(client: Client, last: int) -> None:
    """What a replica's start waited for before snapshots: raw read, then a fold of every event."""
    row(f"raw read of {last:,} events (ordered consumer, no decode)", await raw_read(client, last))
    started, view = time.perf_counter(), LiveState()
    try:  # (it gives up after 120 s)
        await view.start(client)
        row("live view start, full fold (no snapshot)", time.perf_counter() - started)
    except RuntimeError as error:
        print(f"live view start, full fold: not ready after {time.perf_counter() - started:.0f} s: {error}")
    finally:
        await view.stop()


async def event_id_at(client: Client, sequence: int) -> str:
    """The id of the MF_EVENTS event at `sequence` (what a snapshot ending there names)."""
    stored = await client.jetstream().get_msg(subjects.EVENTS_STREAM, seq=sequence, direct=True)
    return str((stored.headers or {})[H_MSG_ID])


async def first_snapshot(client: Client, view: LiveState, last_id: str, verify: bool) -> None:
    """The first snapshot: the state `fill` folded from the events as it sent them. `verify`: as
    a gateway stores it, only if a replay of the log (a full fold) agrees; otherwise stored as it
    is (at 10 M events that replay alone takes longer than this machine's session)."""
    started = time.perf_counter()
    if verify:
        if not await SnapshotWriter(client, view).write():
            raise RuntimeError("the snapshot disagrees with a replay of the log (see the log)")
    else:
        bucket = await client.jetstream().key_value(subjects.SNAPSHOTS_BUCKET)
        await bucket.put(KEY, encode_record(record_of(capture(view), view.applied, last_id)))
    label = "first snapshot stored" + (", after a replay of every event agreed" if verify else "")
    row(label, time.perf_counter() - started)


async def timed_start(client: Client, url: str, last: int) -> None:
    found = await read_snapshot(client)
    after = f"+ {last - found[0].sequence:,} events after it" if found else "(none usable: a full fold)"
    row(f"replica start from the snapshot {after}", await replica_start(url, "bench-replica"))


async def main(events: int, tail: int, home: Path | None, compare: bool) -> None:
    keep = home is not None
    home = home or Path(tempfile.mkdtemp(prefix="mf-startup-"))
    home.mkdir(parents=True, exist_ok=True)
    os.chmod(home, 0o755)
    nats = start_nats(home)
    conn = await connect(nats.url, "bench-startup")
    client = conn.client
    try:
        await provision(client)
        last = (await client.jetstream().stream_info(subjects.EVENTS_STREAM)).state.last_seq
        messages = hot_path("s", first=not last)  # (on a kept store: request ids anew from 0)
        if not last:
            started = time.perf_counter()
            view = LiveState()
            last = await fill(client, messages, events, view)
            filled = time.perf_counter() - started
            info = await client.jetstream().stream_info(subjects.REQUESTS_STREAM)
            print(
                f"filled MF_EVENTS to sequence {last:,} and MF_REQUESTS to {info.state.last_seq:,} in "
                f"{filled:.0f} s ({(last + info.state.last_seq) / filled:,.0f} messages/s); "
                f"store {stream_mib(nats.store_dir):,.0f} MiB",
                flush=True,
            )
            if compare:
                await full_fold_start(client, last)
            await first_snapshot(client, view, await event_id_at(client, last), verify=compare)
        await timed_start(client, nats.url, last)
        if tail:
            last = await fill(client, messages, tail)
            await timed_start(client, nats.url, last)
        print("target: <= 3 s at 10 M events")
    finally:
        await conn.close()
        stop_pid(nats.pid)
        if not keep:
            shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=1_000_000, help="MF_EVENTS events to fill")
    parser.add_argument("--tail", type=int, default=EVERY, help="events after the snapshot")
    parser.add_argument(
        "--home", type=Path, help="keep the store here (a store already there is measured as it is)"
    )
    parser.add_argument(
        "--compare", action="store_true", help="also time a full fold's start, and verify the snapshot"
    )
    args = parser.parse_args()
    asyncio.run(main(args.events, args.tail, args.home, args.compare))
