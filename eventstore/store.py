"""Appending events: optimistic concurrency per aggregate, atomic batches, safe retries.

An append is a JetStream publish whose headers make the server check the aggregate's last
subject sequence, so two writers can never both win the same version. Several events from one
command go as one atomic batch. An ambiguous publish (timeout, reconnect) is retried with the
same `Nats-Msg-Id`s; if the server then reports a conflict whose last event is ours, the first
attempt landed and the append succeeded. A publish no stream answered (no responders: the stream's
leader is being elected after a cluster node left) is resent after a short back-off. Either way
for up to `retry_s`.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import TypeVar

import msgspec
from nats.errors import ConnectionClosedError, NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

from eventstore import reading, replies
from eventstore.connection import Connection
from eventstore.errors import WRONG_LAST_SEQUENCE_CODES, ConcurrencyConflict, EventRejected, PublishFailed
from eventstore.records import RecordedEvent
from streams import codec, configs, subjects
from streams.envelope import SYSTEM, Actor, Envelope, new_id, utcnow
from streams.events import AGGREGATE_OF, REQUEST_EVENTS, Event

DUPLICATE_IN_BATCH = 10201
_attempts = itertools.count()  # keys of in-flight MF_EVENTS publishes watching their connection
# `probe_leader`'s publish: on a subject no aggregate has, expecting a sequence it never reaches, so
# a stream with a leader refuses it (nothing is stored) and one without answers nothing.
_PROBE_SUBJECT = subjects.event_subject(subjects.Aggregate.ACCELERATOR, "leader-probe", "LeaderProbe")
_PROBE_HEADERS = {"Nats-Expected-Last-Subject-Sequence": str(2**62)}
_CONFLICTS = WRONG_LAST_SEQUENCE_CODES | {DUPLICATE_IN_BATCH}
_AMBIGUOUS = (NatsTimeoutError, NoRespondersError, ConnectionClosedError, TimeoutError)
T = TypeVar("T")


class ExpectedVersion(enum.Enum):
    ANY = "any"  # no concurrency check
    NO_STREAM = "no_stream"  # the aggregate must not exist yet


Expected = int | ExpectedVersion


class _ApiError(msgspec.Struct):
    code: int = 0
    err_code: int = 0
    description: str = ""


class _Ack(msgspec.Struct):
    stream: str = ""
    seq: int = 0
    duplicate: bool = False
    error: _ApiError | None = None


_ack_decoder = msgspec.json.Decoder(_Ack)


class Outgoing(msgspec.Struct):
    subject: str
    data: bytes
    headers: dict[str, str]
    envelope: Envelope  # what `headers` carry, for a writer that folds its own events once acknowledged


def prepare(
    events: Sequence[Event],
    aggregate: subjects.Aggregate | None,
    aggregate_id: str,
    actor: Actor,
    correlation_id: str | None,
    causation_id: str | None,
    capability: str = "",
    correlation_ids: Sequence[str | None] | None = None,
    occurred_at: datetime | None = None,
) -> list[Outgoing]:
    """Validate and encode everything before a single byte is published.

    `correlation_ids`, when given, names each event's correlation (a batch gathering the events
    of several requests); otherwise every event carries `correlation_id`."""
    if not events:
        raise EventRejected("nothing to append: no events")
    out = []
    now = occurred_at or utcnow()
    if correlation_ids is not None and len(correlation_ids) != len(events):
        raise EventRejected("one correlation id per event, or none")
    for index, event in enumerate(events):
        if not isinstance(event, Event):
            raise EventRejected(f"not an event: {type(event).__name__}")
        cls = type(event)
        if aggregate is None:
            if cls not in REQUEST_EVENTS:
                raise EventRejected(f"{cls.__name__} is not a request event")
            subject = subjects.request_subject(capability, cls.event_type())
            agg_name = "request"
        else:
            if AGGREGATE_OF.get(cls) is not aggregate:
                raise EventRejected(f"{cls.__name__} does not belong to aggregate {aggregate.value!r}")
            subject = subjects.event_subject(aggregate, aggregate_id, cls.event_type())
            agg_name = aggregate.value
        data = codec.encode(event)
        if len(data) > configs.MAX_EVENT_BYTES - 4096:
            raise EventRejected(f"{cls.__name__} is {len(data)} bytes; events are limited to ~256 KiB")
        envelope = Envelope(
            event_id=new_id(),
            event_type=cls.event_type(),
            schema_version=cls.schema_version,
            aggregate_type=agg_name,
            aggregate_id=aggregate_id,
            occurred_at=now,
            actor=actor,
            correlation_id=correlation_ids[index] if correlation_ids is not None else correlation_id,
            causation_id=causation_id,
        )
        out.append(Outgoing(subject, data, envelope.headers(), envelope))
    return out


def prepare_request(
    capability: str, request_id: str, event: Event, actor: Actor = SYSTEM, occurred_at: datetime | None = None
) -> Outgoing:
    """One per-request event, encoded with its id once: a retry of it is deduplicated.
    `occurred_at`: its envelope's time, where not now (an acceptance recorded after a hold)."""
    (outgoing,) = prepare(
        [event], None, request_id, actor, request_id, None, capability, occurred_at=occurred_at
    )
    return outgoing


PUBLISH_TIMEOUT_S = 5.0  # one append attempt's wait for its acknowledgement, by default


class EventStore:
    """Append side of the event log. One per process; safe for concurrent use."""

    def __init__(
        self, connection: Connection, publish_timeout: float = PUBLISH_TIMEOUT_S, retry_s: float = 30.0
    ) -> None:
        self.connection = connection
        self.client = connection.client
        self.publish_timeout = publish_timeout  # one attempt's wait for its acknowledgement
        self.retry_s = retry_s  # how long an append whose outcome is unknown keeps being resent
        self.last_sequence = 0  # highest MF_EVENTS sequence this process has seen acked (read-your-writes)
        self.last_request_sequence = 0  # the same of MF_REQUESTS (a request history read waits for it)
        # Set while MF_EVENTS appends meet no responders (its leader is being elected), cleared by the
        # next acknowledged one: a caller with room booked ahead (a standby lease) need not wait.
        # Watched only where `notes_leader` (a gateway holding standby leases): watching costs a task
        # and a connection watch per append.
        self.leaderless = asyncio.Event()
        self.notes_leader = False
        self._probe: asyncio.Task[None] | None = None

    async def append(
        self,
        aggregate: subjects.Aggregate | str,
        aggregate_id: str,
        events: Sequence[Event],
        expected_version: Expected,
        *,
        actor: Actor = SYSTEM,
        correlation_id: str | None = None,
        causation_id: str | None = None,
        correlation_ids: Sequence[str | None] | None = None,
        scope: str | None = None,
    ) -> int:
        """Append events to one aggregate; returns its new version (last stream sequence).

        `expected_version` is the aggregate's own, or with `scope` (a wider subject filter, such
        as every aggregate of the type) the last sequence on that scope: a decision that read
        several aggregates then conflicts with a change to any of them."""
        agg = aggregate if isinstance(aggregate, subjects.Aggregate) else subjects.aggregate_type(aggregate)
        outgoing = prepare(
            events, agg, aggregate_id, actor, correlation_id, causation_id, correlation_ids=correlation_ids
        )
        return await self.append_prepared(agg, aggregate_id, outgoing, expected_version, scope)

    async def append_prepared(
        self,
        agg: subjects.Aggregate,
        aggregate_id: str,
        outgoing: list[Outgoing],
        expected_version: Expected,
        scope: str | None = None,
    ) -> int:
        """Publish already-encoded events; calling it again with the same messages is a safe retry."""
        scope = scope or subjects.aggregate_filter(agg, aggregate_id)
        first = outgoing[0].headers
        if expected_version is not ExpectedVersion.ANY:
            expected = 0 if expected_version is ExpectedVersion.NO_STREAM else int(expected_version)
            first["Nats-Expected-Last-Subject-Sequence"] = str(expected)
            first["Nats-Expected-Last-Subject-Sequence-Subject"] = scope
        try:
            return await self._publish(outgoing)
        except PublishFailed as exc:
            if exc.err_code not in _CONFLICTS:
                raise
            # A retry whose first attempt landed is refused as a conflict (or as a duplicate batch):
            # if our last event is already stored after the expected version, the append succeeded.
            after = expected_version if isinstance(expected_version, int) else 0
            actual = _actual_from(exc.description)
            # Read from a replica holding at least what the server just compared against: one
            # still behind would lack our landed event and turn the success into a conflict.
            landed, version = await self._sequence_of(
                agg, aggregate_id, after, outgoing[-1].headers["Nats-Msg-Id"], max(actual, self.last_sequence)
            )
            if landed:
                self.last_sequence = max(self.last_sequence, landed)
                return landed
            if exc.err_code == DUPLICATE_IN_BATCH:
                raise
            # 10164 names no sequence: the aggregate's version as read now stands for it (the
            # append in flight that won may not be stored yet: the caller then decides again at once).
            raise ConcurrencyConflict(
                agg.value, aggregate_id, _show(expected_version), max(actual, version)
            ) from None

    async def _sequence_of(
        self, agg: subjects.Aggregate, aggregate_id: str, after: int, event_id: str, min_last_seq: int
    ) -> tuple[int, int]:
        """(the sequence our event was stored at, or 0; the aggregate's version as read). Retried as
        the publish is: the conflict that asks for this read can come just before the stream's
        leader is lost, and a read of what a replica lacked goes to the leader."""
        records, version = await self._answered(
            lambda: reading.load(self.client, agg, aggregate_id, after, min_last_seq)
        )
        landed = next((r.sequence for r in records if r.envelope and r.envelope.event_id == event_id), 0)
        return landed, version

    def saw(self, sequence: int) -> None:
        """An MF_EVENTS sequence this process read live (another process's append, say): later
        loads include it too, whichever replica answers them."""
        self.last_sequence = max(self.last_sequence, sequence)

    async def load(
        self, aggregate: subjects.Aggregate | str, aggregate_id: str, after_sequence: int = 0
    ) -> tuple[list[RecordedEvent], int]:
        """(events, version) of one aggregate, including this process's own latest appends."""
        agg = aggregate if isinstance(aggregate, subjects.Aggregate) else subjects.aggregate_type(aggregate)
        return await reading.load(self.client, agg, aggregate_id, after_sequence, self.last_sequence)

    async def load_latest_of_each(
        self, aggregate: subjects.Aggregate, aggregate_id: str
    ) -> tuple[list[RecordedEvent], int]:
        """(the last event of each type, version) of one aggregate, including this process's own
        latest appends: for a fold that keeps only the latest of each type (`reading.latest_of_each`)."""
        return await reading.latest_of_each(self.client, aggregate, aggregate_id, self.last_sequence)

    async def record_request(
        self,
        capability: str,
        request_id: str,
        event: Event,
        *,
        actor: Actor = SYSTEM,
    ) -> int:
        """Append one per-request event to MF_REQUESTS (no concurrency check; dedupe by id)."""
        return await self.record_prepared_request(prepare_request(capability, request_id, event, actor))

    async def record_prepared_request(self, outgoing: Outgoing) -> int:
        """Publish a prepared per-request event; calling it again with it is a safe retry (same id)."""
        return await self._publish([outgoing], events_stream=False)

    async def _publish(self, outgoing: list[Outgoing], events_stream: bool = True) -> int:
        """`events_stream`: the messages go to MF_EVENTS, whose sequence `last_sequence` tracks
        (MF_REQUESTS numbers its own messages; mixing the two would ask reads for events that
        do not exist yet)."""
        if len(outgoing) > 1:
            batch_id = new_id()
            for index, message in enumerate(outgoing, start=1):
                message.headers["Nats-Batch-Id"] = batch_id
                message.headers["Nats-Batch-Sequence"] = str(index)
            outgoing[-1].headers["Nats-Batch-Commit"] = "1"
        try:
            seq = await self._answered(
                (lambda: self._noting_leader(outgoing))
                if events_stream and self.notes_leader
                else (lambda: self._publish_once(outgoing))
            )
        except _AMBIGUOUS as exc:
            raise PublishFailed(outgoing[0].subject, 0, _unacknowledged(self.retry_s, exc)) from None
        if events_stream:
            self.last_sequence = max(self.last_sequence, seq)
        else:
            self.last_request_sequence = max(self.last_request_sequence, seq)
        return seq

    async def _answered(self, attempt: Callable[[], Awaitable[T]]) -> T:
        """`attempt()` until it is answered, for up to `retry_s`: again while no server answers it
        (a stream electing its leader), and again once connected after an unknown outcome (a
        timeout, a lost connection: a publish resends the same ids). Past `retry_s` the last
        error is raised."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self.retry_s
        while True:
            try:
                return await replies.resend_while_leaderless(attempt, give_up - loop.time())
            except _AMBIGUOUS:
                remaining = give_up - loop.time()
                if remaining <= 0:
                    raise
                await self.connection.wait_connected(min(self.publish_timeout, remaining))

    def probe_leader(self) -> asyncio.Task[None]:
        """Ask MF_EVENTS, in the background, whether it has a leader (one question at a time): for a
        caller whose append is taking long, which may have gone to a leader that is gone and wait
        out the publish timeout. No responders sets `leaderless`; a refusal (a leader) clears it."""
        if self._probe is None or self._probe.done():
            self._probe = asyncio.ensure_future(self._ask_leader())
        return self._probe

    async def _ask_leader(self) -> None:
        try:
            await replies.inbox_of(self.client).request(
                _PROBE_SUBJECT, b"", self.publish_timeout, dict(_PROBE_HEADERS)
            )
        except replies.NO_LEADER:
            self.leaderless.set()
        except Exception:  # unknown (a timeout, a reconnect): nothing learnt
            return
        else:
            self.leaderless.clear()

    async def _noting_leader(self, outgoing: list[Outgoing]) -> int:
        """An MF_EVENTS publish, noting in `leaderless` whether the stream answered it. If the
        connection drops under it, its outcome is unknown at once (resent once connected, with the
        same ids): its reply may have gone with the server, and waiting out the publish timeout
        would hide for seconds that the stream it led has no leader now."""
        attempt = asyncio.ensure_future(self._publish_once(outgoing))
        key, dropped = f"append-{next(_attempts)}", False

        def drop() -> None:
            nonlocal dropped
            dropped = True
            attempt.cancel()

        self.connection.watch_drop(key, drop)
        try:
            seq = await attempt
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if not dropped or (task is not None and task.cancelling()):
                raise
            raise NatsTimeoutError from None  # unknown: `_answered` resends it once connected
        except replies.NO_LEADER:
            self.leaderless.set()
            raise
        finally:
            self.connection.unwatch_drop(key)
        self.leaderless.clear()
        return seq

    async def _publish_once(self, outgoing: list[Outgoing]) -> int:
        inbox, timeout = replies.inbox_of(self.client), self.publish_timeout
        if len(outgoing) == 1:
            reply = await inbox.request(outgoing[0].subject, outgoing[0].data, timeout, outgoing[0].headers)
            return ack_sequence(outgoing[0].subject, reply.data)
        head, *middle, tail = outgoing
        # Atomic batch: the opening and the commit are requests, the rest plain publishes, all sent
        # before waiting (one round trip). The server applies them in order; if it refused to open
        # the batch, the commit is refused too, and the opening's reply says why.
        opening = await inbox.send(head.subject, head.data, timeout, head.headers)
        try:
            for message in middle:
                await self.client.publish(message.subject, message.data, headers=message.headers)
            commit = await inbox.send(tail.subject, tail.data, timeout, tail.headers)
        except BaseException:
            opening.cancel()
            raise
        try:
            opened = await replies.reply(opening)
            if opened.data:  # an empty reply means the batch is open; anything else is a refusal
                ack_sequence(head.subject, opened.data)
        except BaseException:
            commit.cancel()
            raise
        return ack_sequence(tail.subject, (await replies.reply(commit)).data)


def ack_sequence(subject: str, data: bytes) -> int:
    """The stream sequence a publish's acknowledgement gives; PublishFailed for a refusal."""
    if not data:
        raise PublishFailed(subject, 0, "empty acknowledgement")
    ack = _ack_decoder.decode(data)
    if ack.error is not None:
        raise PublishFailed(subject, ack.error.err_code, ack.error.description)
    return ack.seq


def _unacknowledged(retry_s: float, last_error: Exception) -> str:
    if isinstance(last_error, NoRespondersError):
        return (
            f"no stream took it for {retry_s:.0f} s (not provisioned, or no leader elected): {last_error!r}"
        )
    return f"no acknowledgement within {retry_s:.0f} s: {last_error!r}"


def _actual_from(description: str) -> int:
    # "wrong last sequence: 41"
    tail = description.rsplit(":", 1)[-1].strip()
    return int(tail) if tail.isdigit() else 0


def _show(expected: Expected) -> int | str:
    return expected.value if isinstance(expected, ExpectedVersion) else expected
