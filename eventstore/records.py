"""What a reader gets back: an event (or an UnknownEvent) with its envelope and sequence."""

from __future__ import annotations

import msgspec

from streams.codec import UnknownEvent, decode
from streams.envelope import H_EVENT_TYPE, H_SCHEMA_VERSION, Envelope
from streams.events import Event


class RecordedEvent(msgspec.Struct, frozen=True):
    sequence: int  # stream sequence: the aggregate's version after this event
    subject: str
    envelope: Envelope | None  # None for a foreign message without our headers
    event: Event | UnknownEvent


def record_from(sequence: int, subject: str, headers: dict[str, str] | None, data: bytes) -> RecordedEvent:
    """Decode one stored message; anything foreign or newer becomes an UnknownEvent."""
    hdrs = headers or {}
    try:
        envelope: Envelope | None = Envelope.from_headers(hdrs)
    except (KeyError, ValueError):
        envelope = None
    if envelope is None:
        event_type = hdrs.get(H_EVENT_TYPE, subject.rsplit(".", 1)[-1])
        version = hdrs.get(H_SCHEMA_VERSION, "0")
        reason = "missing or malformed envelope headers"
        unknown = UnknownEvent(event_type, int(version) if version.isdigit() else 0, data, reason)
        return RecordedEvent(sequence, subject, None, unknown)
    return RecordedEvent(
        sequence, subject, envelope, decode(envelope.event_type, envelope.schema_version, data)
    )
