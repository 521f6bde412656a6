"""An audit consumer: every event as it happens, decoded, one line each.

It reads only headers to filter and format, so it works for events this build cannot decode too.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator
from datetime import datetime

import msgspec
from nats.aio.client import Client

from eventstore.records import RecordedEvent
from eventstore.subscription import subscribe
from streams import subjects
from streams.codec import UnknownEvent
from streams.redaction import redacted


def audit_filter(aggregate: str | None, event_type: str | None) -> str:
    agg = subjects.aggregate_type(aggregate) if aggregate else None
    return subjects.aggregate_type_filter(agg, event_type)


async def tail(
    client: Client,
    aggregate: str | None = None,
    event_type: str | None = None,
    since_sequence: int = 1,
    since_time: datetime | None = None,
) -> AsyncGenerator[RecordedEvent, None]:
    records = subscribe(
        client, since_sequence, filter_subject=audit_filter(aggregate, event_type), since_time=since_time
    )
    async with contextlib.aclosing(records):  # closed with this generator, before its connection
        async for record in records:
            yield record


def format_line(record: RecordedEvent) -> str:
    env, event = record.envelope, record.event
    if isinstance(event, UnknownEvent):
        body = f"<unknown: {event.reason}> {len(event.data)} bytes"
        name = event.event_type
    else:
        body = msgspec.json.encode(redacted(event)).decode()
        name = type(event).__name__
    if env is None:
        return f"{record.sequence:>8}  {record.subject}  {name}  {body}"
    when = env.occurred_at.isoformat(timespec="milliseconds")
    return f"{record.sequence:>8}  {when}  {env.aggregate_type}/{env.aggregate_id}  {name}  by {env.actor}  {body}"


def format_json(record: RecordedEvent) -> bytes:
    event = record.event
    payload: object = (
        {"unknown": event.reason, "type": event.event_type}
        if isinstance(event, UnknownEvent)
        else redacted(event)
    )
    return msgspec.json.encode(
        {
            "sequence": record.sequence,
            "subject": record.subject,
            "envelope": record.envelope,
            "event": payload,
        }
    )
