"""Catch-up then live: every event from a sequence on, in order, no gaps, no duplicates.

Built on JetStream's ordered consumer (it recreates itself from the last delivered sequence after
a gap, a missed heartbeat or a reconnect). We also drop anything at or below the last sequence
handed out, so a redelivery after a reset can never surface twice.

Deliveries come through a callback into a queue of our own, not nats-py's `sub.messages`: its
iterator makes a task and an `asyncio.wait` for every message, which was most of the cost of a
delivery (a gateway hears every event of the log, and folds the log's tail when it starts).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncGenerator, Callable, Sequence
from datetime import datetime

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig, DeliverPolicy
from nats.js.client import JetStreamContext

from eventstore.records import RecordedEvent, record_from
from streams import subjects

HEARTBEAT_S = 2.0
_V1_TOKENS = 9


async def subscribe(
    client: Client,
    from_sequence: int = 1,
    *,
    stream: str = subjects.EVENTS_STREAM,
    filter_subject: str | Sequence[str] | None = None,
    since_time: datetime | None = None,
    folded: Callable[[int, str], bool] | None = None,
) -> AsyncGenerator[RecordedEvent, None]:
    """Yield events with sequence >= from_sequence (or stored at/after since_time), forever.

    `folded(sequence, subject)`: true for an event the caller already holds (its own append,
    applied when acknowledged); such an event is passed over without being decoded.
    Several filter subjects make one consumer over all of them (nats-server >= 2.10): their
    events still arrive in stream order."""
    filters = (
        [filter_subject] if isinstance(filter_subject, str) and filter_subject else list(filter_subject or ())
    )
    everything = f"{subjects.EVENTS_PREFIX}.>" if stream == subjects.EVENTS_STREAM else ">"
    subject = filters[0] if len(filters) == 1 else everything  # several go in the consumer's config
    if since_time is not None:
        config = ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_TIME, opt_start_time=since_time)
    else:
        config = ConsumerConfig(
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=max(1, from_sequence)
        )
    if len(filters) > 1:
        config.filter_subjects = filters
    delivered: deque[Msg] = deque()
    arrived = asyncio.Event()

    async def take(msg: Msg) -> None:  # nats-py's delivery task calls it, a message at a time
        delivered.append(msg)
        arrived.set()

    js = client.jetstream()
    sub = await js.subscribe(
        subject,
        stream=stream,
        cb=take,
        ordered_consumer=True,
        idle_heartbeat=HEARTBEAT_S,
        config=config,
        pending_msgs_limit=-1,
        pending_bytes_limit=-1,
    )
    _without_flow_control_poll(sub)
    last = max(0, from_sequence - 1)
    try:
        while True:
            await arrived.wait()
            arrived.clear()
            while delivered:
                msg = delivered.popleft()
                sequence = stream_sequence(msg)
                if sequence <= last:
                    continue
                last = sequence
                if folded is not None and folded(sequence, msg.subject):
                    continue
                yield record_from(sequence, msg.subject, msg.headers, msg.data)
    finally:
        await sub.unsubscribe()


def _without_flow_control_poll(sub: JetStreamContext.PushSubscription) -> None:
    """Stop nats-py's flow-control poll of this ordered consumer: a task that wakes four times a
    second to send a flow-control reply it put off, for each subscription, the process idle or not.
    A callback subscription never puts one off (nats-py counts its deliveries as they arrive, so
    each flow-control message is answered at once), and a stalled consumer's heartbeat carries the
    reply to send, which nats-py answers when it arrives."""
    polling = getattr(getattr(sub._sub, "_jsi", None), "_fctask", None)
    if isinstance(polling, asyncio.Task):
        polling.cancel()


def stream_sequence(msg: Msg) -> int:
    """The stream sequence from a JetStream delivery's reply subject, without building all of
    `msg.metadata` (it parses a timestamp into a datetime: a third of the cost of a delivery)."""
    tokens = msg.reply.split(".")
    if len(tokens) == _V1_TOKENS and tokens[0] == "$JS":  # $JS.ACK.<stream>.<consumer>.<delivered>.<seq>.…
        return int(tokens[5])
    return msg.metadata.sequence.stream
