"""Reading an aggregate's events with batched direct gets (one round trip per 1,000 events).

Direct get is served from the stream's storage without creating a consumer, so loading an
aggregate with thousands of events costs a handful of round trips. Any replica may answer one,
so a read that must include our own writes up to `min_last_seq` (read-your-writes in a
cluster) then asks the stream's leader for anything on the subject the replica lacked.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Sequence

import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import NoRespondersError
from nats.js.errors import NotFoundError

from eventstore.records import RecordedEvent, record_from
from streams import subjects

BATCH = 1_000


class _DirectGetBatch(msgspec.Struct):
    seq: int
    next_by_subj: str
    batch: int


class _DirectGetLast(msgspec.Struct):
    multi_last: list[str]
    batch: int


async def read_subject_range(
    client: Client,
    stream: str,
    filter_subject: str,
    after_sequence: int = 0,
    min_last_seq: int = 0,
    timeout: float = 5.0,
) -> list[RecordedEvent]:
    """Every message on `filter_subject` with sequence > after_sequence, in order; complete at
    least up to `min_last_seq` (read-your-writes) whichever replica answered."""
    records: list[RecordedEvent] = []
    async for got in batches(client, stream, filter_subject, after_sequence, timeout=timeout):
        records.extend(got)
    if min_last_seq:
        read_up_to = records[-1].sequence if records else after_sequence
        records.extend(
            await _missed_by_replica(client, stream, filter_subject, read_up_to, min_last_seq, timeout)
        )
    return records


async def batches(
    client: Client,
    stream: str,
    filter_subject: str,
    after_sequence: int = 0,
    up_to: int | None = None,
    timeout: float = 5.0,
) -> AsyncGenerator[list[RecordedEvent], None]:
    """The messages on `filter_subject` after `after_sequence`, a batch at a time, in order: up to
    the end of what the answering replica holds, or only up to `up_to` (a long read then ends
    even while the stream keeps growing faster than it is read)."""
    start = after_sequence + 1
    while up_to is None or start <= up_to:
        request = _DirectGetBatch(start, filter_subject, BATCH)
        got, pending, last = await _one_batch(client, stream, request, start, timeout)
        if up_to is not None:
            got = [record for record in got if record.sequence <= up_to]
        if got:
            yield got
        if pending <= 0 or not got:
            return
        start = last + 1


async def read_subjects_range(
    client: Client, stream: str, filter_subjects: Sequence[str], after_sequence: int = 0
) -> tuple[list[RecordedEvent], int]:
    """Every message on any of `filter_subjects` with sequence > after_sequence, in stream order,
    up to a horizon: the stream's last sequence when the read began, which is returned with them.
    Each subject's read is complete up to the horizon (what a replica behind it lacked comes from
    the leader);
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


async def _missed_by_replica(
    client: Client, stream: str, filter_subject: str, read_up_to: int, min_last_seq: int, timeout: float
) -> list[RecordedEvent]:
    """What a direct get's replica had not stored yet, up to `min_last_seq`, from the stream's
    leader (`STREAM.MSG.GET`, one message a request). Direct gets may be answered by any replica
    and a direct get cannot ask for one caught up: nats-server 2.15.1 answered every replica of a
    cluster with data when asked for a `min_last_seq` past the stream's end, and a load after a
    leader was lost once missed the last of 300 acknowledged appends. Usually one round trip that
    finds nothing missed."""
    js = client.jetstream(timeout=timeout)
    missed: list[RecordedEvent] = []
    seq = read_up_to + 1
    while seq <= min_last_seq:
        try:
            msg = await js.get_msg(stream, seq=seq, subject=filter_subject, next=True)
        except NotFoundError:
            break
        assert msg.seq is not None  # (always set on a stored message)
        assert msg.subject is not None
        if msg.seq > min_last_seq:
            break  # stored after what the caller asked to see: a later read's
        missed.append(record_from(msg.seq, msg.subject, msg.headers or {}, msg.data or b""))
        seq = msg.seq + 1
    return missed


async def _one_batch(
    client: Client, stream: str, request: _DirectGetBatch | _DirectGetLast, start: int, timeout: float
) -> tuple[list[RecordedEvent], int, int]:
    inbox = client.new_inbox()
    queue: asyncio.Queue[Msg] = asyncio.Queue()

    async def collect(msg: Msg) -> None:
        queue.put_nowait(msg)

    sub = await client.subscribe(inbox, cb=collect)
    try:
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
                if status == "503" and not msg.data:
                    # No server took the request: in a cluster, the replicas that answer direct gets
                    # leave for a moment as a stream elects a new leader. The error a publish gets
                    # then, so a read in `resend_while_leaderless` is sent again as an append is.
                    raise NoRespondersError
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


async def latest_of_each(
    client: Client,
    aggregate: subjects.Aggregate,
    aggregate_id: str,
    min_last_seq: int = 0,
    timeout: float = 5.0,
) -> tuple[list[RecordedEvent], int]:
    """(the last event of each type the aggregate holds, in stream order; its version), for a fold
    that keeps only the latest of each type; complete up to `min_last_seq` (read-your-writes) as
    `load` is. One direct get (`multi_last`) answered from the stream's per-subject index, however
    long the log: `load` has nats-server walk every message block between the aggregate's events,
    which for a node (registered at the start of the log, a generation at each restart) took
    3.1-4.9 s at 10 M events (docs/performance.md)."""
    scope = subjects.aggregate_filter(aggregate, aggregate_id)
    request = _DirectGetLast([scope], BATCH)
    records, _, _ = await _one_batch(client, subjects.EVENTS_STREAM, request, 1, timeout)
    if min_last_seq:
        read_up_to = max((record.sequence for record in records), default=0)
        missed = await _missed_by_replica(
            client, subjects.EVENTS_STREAM, scope, read_up_to, min_last_seq, timeout
        )
        records = list({record.subject: record for record in [*records, *missed]}.values())
    records.sort(key=lambda record: record.sequence)
    return records, records[-1].sequence if records else 0
