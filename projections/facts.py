"""A delivered message as the projector sees it: stream position, envelope headers, decoded event."""

from __future__ import annotations

from typing import NamedTuple

from projections.source import Delivery, parse_headers
from streams.codec import UnknownEvent, decode
from streams.envelope import H_EVENT_TYPE, H_OCCURRED_AT, H_SCHEMA_VERSION
from streams.events import Event

FOREIGN = "missing or malformed envelope headers"
UNKNOWN_TYPE = "unknown event type"


class Fact(NamedTuple):
    stream: str
    seq: int
    subject: str
    headers: dict[str, str]
    event: Event | UnknownEvent
    occurred_at: str | None  # ISO 8601 from the envelope; PostgreSQL parses it
    stored_ns: int


def fact_from(stream: str, delivery: Delivery) -> Fact:
    headers = parse_headers(delivery.headers) if delivery.headers else {}
    event_type = headers.get(H_EVENT_TYPE)
    version = headers.get(H_SCHEMA_VERSION, "")
    event: Event | UnknownEvent
    if event_type is None or not version.isdigit() or H_OCCURRED_AT not in headers:
        name = event_type or delivery.subject.rsplit(".", 1)[-1]
        event = UnknownEvent(name, int(version) if version.isdigit() else 0, delivery.data, FOREIGN)
    else:
        event = decode(event_type, int(version), delivery.data)
    return Fact(
        stream, delivery.seq, delivery.subject, headers, event, headers.get(H_OCCURRED_AT), delivery.stored_ns
    )


def tolerated(event: UnknownEvent) -> bool:
    """Unknown types and foreign messages are recorded and skipped; a known type that does not
    decode (corrupt payload, newer schema, missing upcaster) cannot be applied safely."""
    return event.reason in (UNKNOWN_TYPE, FOREIGN)
