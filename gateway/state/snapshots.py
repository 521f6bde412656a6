"""Snapshots of the live view in the MF_SNAPSHOTS KV bucket: read at start, written in the background.

Start: the latest snapshot, if it is usable (this fold's, and what its digest says), is restored and
only the events after its sequence are folded; otherwise everything is folded, as before.

Writing: every `every` events a gateway captures its view (at a moment when it holds exactly the
events up to its `applied` sequence) and, before storing it, checks it against a replay: the
previous stored snapshot (or nothing, the first time) with the events up to the same sequence
folded onto it by a fresh view. Only a capture whose digest matches the replay's is stored, so each
stored snapshot equals a replay from the one before, and by induction a replay of the whole log;
one that disagrees is logged and dropped, and the bucket keeps the previous one. The replay costs
O(state + events since the last snapshot), off the request path.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os

import msgspec
from nats.aio.client import Client
from nats.errors import Error as NatsError
from nats.js.errors import BucketNotFoundError, KeyNotFoundError, NotFoundError
from nats.js.kv import KeyValue

from eventstore import reading
from gateway.state.live import LiveState
from gateway.state.snapshot import (
    LiveSnapshot,
    SnapshotRecord,
    SnapshotUnusable,
    capture,
    digest_of,
    encode_record,
    encode_state,
    open_record,
    record_of,
    restore,
)
from streams import subjects
from streams.envelope import H_MSG_ID

log = logging.getLogger("modelforge.gateway.snapshots")
KEY = "live"
EVERY = 5_000  # events between snapshots (MODELFORGE_SNAPSHOT_EVERY)
YIELD_EVERY = 100  # events a replay folds between letting the event loop run others

Snapshot = tuple[SnapshotRecord, LiveSnapshot]


async def _bucket(client: Client) -> KeyValue | None:
    try:
        return await client.jetstream().key_value(subjects.SNAPSHOTS_BUCKET)
    except BucketNotFoundError:
        return None


async def read_snapshot(client: Client) -> Snapshot | None:
    """The stored snapshot, or None: none stored, no bucket, or unusable (logged): not what it
    says it is, or made on a log other than the one now in MF_EVENTS."""
    bucket = await _bucket(client)
    if bucket is None:
        log.warning(
            "no %s bucket (run `modelforge provision`): folding every event", subjects.SNAPSHOTS_BUCKET
        )
        return None
    try:
        entry = await bucket.get(KEY)
    except KeyNotFoundError:
        return None
    try:
        found = open_record(entry.value or b"")
        await _check_on_log(client, found[0])
    except SnapshotUnusable as why:
        log.warning("not starting from the stored snapshot: %s", why)
        return None
    return found


async def _check_on_log(client: Client, record: SnapshotRecord) -> None:
    """One direct get: the event the snapshot ends with is still at its sequence (not so after a
    restore from an older backup, or on a stream made anew)."""
    try:
        stored = await client.jetstream().get_msg(subjects.EVENTS_STREAM, seq=record.sequence, direct=True)
    except NotFoundError:
        raise SnapshotUnusable(f"MF_EVENTS holds no event at its sequence {record.sequence}") from None
    if (stored.headers or {}).get(H_MSG_ID) != record.event_id:
        raise SnapshotUnusable(f"MF_EVENTS holds another event at its sequence {record.sequence}")


async def start_live(client: Client, live: LiveState) -> int:
    """Start `live` from the stored snapshot when there is a usable one; returns the sequence it
    started after (0: it folded every event)."""
    found = await read_snapshot(client)
    if found is not None:
        restore(live, found[1], found[0].sequence)
    await live.start(client)
    return found[0].sequence if found is not None else 0


async def replay(client: Client, base: Snapshot | None, up_to: int) -> tuple[LiveState, str]:
    """A fresh view: `base` (or nothing) with MF_EVENTS after it, up to `up_to`, folded onto it;
    and the id of the last event it folded."""
    view, last_id = LiveState(), base[0].event_id if base is not None else ""
    if base is not None:
        restore(view, base[1], base[0].sequence)
    everything = f"{subjects.EVENTS_PREFIX}.>"
    async for batch in reading.batches(client, subjects.EVENTS_STREAM, everything, view.applied, up_to):
        for index, record in enumerate(batch, start=1):
            view.apply(record)
            if index % YIELD_EVERY == 0:
                await asyncio.sleep(0)  # (a gateway's requests share this loop: let them run)
        last_id = batch[-1].envelope.event_id if batch[-1].envelope else ""
    view.followed = view.applied  # (it holds exactly the events up to there: settled)
    return view, last_id


def _books(snapshot: LiveSnapshot) -> str:
    """The digest a capture and its replay must agree on: all but the forged messages not yet
    recorded, which the upkeep drops from the view once it appended their record, before the log
    delivers that record back (the replay, up to an earlier sequence, still holds them)."""
    return digest_of(encode_state(msgspec.structs.replace(snapshot, forged=())))


class SnapshotWriter:
    """Stores a verified snapshot of `live` every `every` events, in the background."""

    def __init__(self, client: Client, live: LiveState, every: int | None = None) -> None:
        self.client, self.live = client, live
        self.every = every or int(os.environ.get("MODELFORGE_SNAPSHOT_EVERY", EVERY))
        self.stored_at = live.applied  # the sequence of the last snapshot this replica knows of
        self.refused = 0  # captures that disagreed with their replay
        self._due = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        # (after a change; and once our own appends' echoes are delivered, when it may be settled)
        self.live.listeners.append(self._check_due)
        self.live.settled_listeners.append(self._check_due)
        self._task = asyncio.create_task(self._run(), name="live-snapshots")

    async def close(self) -> None:
        for listeners in (self.live.listeners, self.live.settled_listeners):
            with contextlib.suppress(ValueError):
                listeners.remove(self._check_due)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def _check_due(self) -> None:  # (a listener: called after every change, so it must be cheap)
        if self.live.applied - self.stored_at >= self.every and self.live.settled():
            self._due.set()

    async def _run(self) -> None:
        while True:
            await self._due.wait()
            self._due.clear()
            try:
                await self.write()
            except (NatsError, TimeoutError, RuntimeError) as error:
                self.stored_at = self.live.applied  # (the next try comes `every` events on, not at once)
                log.warning("live view snapshot not written: %r", error)

    async def write(self) -> bool:
        """Capture the view, check it against a replay, store it; false if it was not stored."""
        if not self.live.settled():
            return False
        sequence, state = self.live.applied, capture(self.live)
        bucket = await _bucket(self.client)
        if bucket is None:
            return False
        base = await read_snapshot(self.client)
        if base is not None and base[0].sequence >= sequence:
            self.stored_at = base[0].sequence  # another replica stored one as recent
            return False
        view, event_id = await replay(self.client, base, sequence)
        replayed = capture(view)
        if _books(replayed) != _books(state) or view.applied != sequence:
            self.refused += 1
            self.stored_at = sequence  # (not again at once: the next is due `every` events on)
            log.error("the live view at sequence %d disagrees with a replay of the log: not stored", sequence)
            return False
        record = record_of(replayed, sequence, event_id)  # (the log's fold: the view's books)
        await bucket.put(KEY, encode_record(record))
        self.stored_at = sequence
        log.info("stored a snapshot of the live view at sequence %d (%d bytes)", sequence, len(record.state))
        return True
