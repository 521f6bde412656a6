"""Reading an aggregate's events with batched direct gets (one round trip per 1,000 events).

Direct get is served from the stream's storage without creating a consumer, so loading an
aggregate with thousands of events costs a handful of round trips. `min_last_seq` makes a
replica that has not yet caught up with our own last write wait: read-your-writes in a cluster.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.errors import NotFoundError

from eventstore.records import RecordedEvent, record_from
from streams import subjects

BATCH = 1_000


class _DirectGetBatch(msgspec.Struct, omit_defaults=True):
    seq: int
    next_by_subj: str
    batch: int
    min_last_seq: int = 0


async def read_subject_range(
    client: Client,
    stream: str,
    filter_subject: str,
    after_sequence: int = 0,
    min_last_seq: int = 0,
    timeout: float = 5.0,
) -> list[RecordedEvent]:
    """Every message on `filter_subject` with sequence > after_sequence, in order."""
    records: list[RecordedEvent] = []
    start = after_sequence + 1
    while True:
        got, pending, last = await _one_batch_behind_replicas(
            client, stream, filter_subject, start, min_last_seq, timeout
        )
        records.extend(got)
        if pending <= 0 or not got:
            return records
        start = last + 1


async def read_subjects_range(
    client: Client, stream: str, filter_subjects: Sequence[str], after_sequence: int = 0
) -> tuple[list[RecordedEvent], int]:
    """Every message on any of `filter_subjects` with sequence > after_sequence, in stream order,
    up to a horizon: the stream's last sequence when the read began, which is returned with them.
    Each subject's read is complete up to the horizon (and a replica behind it is not asked);
    what was stored after it is left out, so a subscription from horizon + 1 misses nothing."""
    horizon = (await client.jetstream().stream_info(stream)).state.last_seq
    if horizon <= after_sequence:
        return [], after_sequence
    records = [
        record
        for subject in filter_subjects
        for record in await read_subject_range(client, stream, subject, after_sequence, horizon)
        if record.sequence <= horizon
    ]
    return sorted(records, key=lambda record: record.sequence), horizon


async def _one_batch_behind_replicas(
    client: Client, stream: str, filter_subject: str, start: int, min_last_seq: int, timeout: float
) -> tuple[list[RecordedEvent], int, int]:
    # A replica behind `min_last_seq` answers 412; another replica (or the leader) will not.
    for _ in range(5):
        try:
            return await _one_batch(client, stream, filter_subject, start, min_last_seq, timeout)
        except _ReplicaBehind:
            continue
    # Each answer came from a replica still behind (direct gets go to any replica): ask the
    # stream's leader, which never is. Reading with no `min_last_seq` instead could miss our own
    # latest writes, as it did once after a leader was lost.
    return await _from_leader(client, stream, filter_subject, start, timeout)


async def _from_leader(
    client: Client, stream: str, filter_subject: str, start: int, timeout: float
) -> tuple[list[RecordedEvent], int, int]:
    """Up to a batch of messages on `filter_subject` from `start` on, one leader-served message
    get (`STREAM.MSG.GET`) each: slower than a direct get's batch, and only a fallback."""
    js = client.jetstream(timeout=timeout)
    records: list[RecordedEvent] = []
    seq = start
    while len(records) < BATCH:
        try:
            msg = await js.get_msg(stream, seq=seq, subject=filter_subject, next=True)
        except NotFoundError:
            return records, 0, records[-1].sequence if records else start - 1
        assert msg.seq is not None  # (always set on a stored message)
        assert msg.subject is not None
        records.append(record_from(msg.seq, msg.subject, msg.headers or {}, msg.data or b""))
        seq = msg.seq + 1
    return records, 1, records[-1].sequence  # (maybe more: the caller asks again from here)


class _ReplicaBehind(Exception):
    pass


async def _one_batch(
    client: Client, stream: str, filter_subject: str, start: int, min_last_seq: int, timeout: float
) -> tuple[list[RecordedEvent], int, int]:
    inbox = client.new_inbox()
    queue: asyncio.Queue[Msg] = asyncio.Queue()

    async def collect(msg: Msg) -> None:
        queue.put_nowait(msg)

    sub = await client.subscribe(inbox, cb=collect)
    try:
        request = _DirectGetBatch(start, filter_subject, BATCH, min_last_seq)
        await client.publish(f"$JS.API.DIRECT.GET.{stream}", msgspec.json.encode(request), reply=inbox)
        records: list[RecordedEvent] = []
        while True:
            async with asyncio.timeout(timeout):
                msg = await queue.get()
            headers = msg.headers or {}
            status = headers.get("Status")
            if status:
                # 204 ends a batch; 404 means nothing matched from `start` on.
                if status in ("204", "404"):
                    pending = int(headers.get("Nats-Num-Pending", "0"))
                    last = records[-1].sequence if records else start - 1
                    return records, pending, last
                if status == "412":
                    raise _ReplicaBehind()
                raise RuntimeError(
                    f"direct get on {stream} failed: {status} {headers.get('Description', '')}"
                )
            records.append(
                record_from(int(headers["Nats-Sequence"]), headers["Nats-Subject"], headers, msg.data)
            )
    finally:
        await sub.unsubscribe()


async def load(
    client: Client,
    aggregate: subjects.Aggregate,
    aggregate_id: str,
    after_sequence: int = 0,
    min_last_seq: int = 0,
) -> tuple[list[RecordedEvent], int]:
    """(events, version) of one aggregate; version 0 means it has no events yet.

    `after_sequence` lets a caller start from a snapshot and read only the tail.
    """
    scope = subjects.aggregate_filter(aggregate, aggregate_id)
    records = await read_subject_range(client, subjects.EVENTS_STREAM, scope, after_sequence, min_last_seq)
    version = records[-1].sequence if records else after_sequence
    return records, version
