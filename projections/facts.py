"""A delivered message as the projector sees it: stream position, envelope headers, decoded event."""

from __future__ import annotations

import msgspec

from projections.source import Delivery, parse_headers
from streams.codec import NEWER_SCHEMA, UNKNOWN_TYPE, UnknownEvent, decode
from streams.envelope import H_EVENT_TYPE, H_OCCURRED_AT, H_SCHEMA_VERSION
from streams.events import CATALOGUE, Event

FOREIGN = "missing or malformed envelope headers"


class Fact(msgspec.Struct, gc=False):  # a Struct: built per event, 3x cheaper than a NamedTuple
    stream: str
    seq: int
    subject: str
    headers: dict[str, str]
    event: Event | UnknownEvent
    occurred_at: str | None  # ISO 8601 from the envelope; PostgreSQL parses it
    stored_ns: int
    # The payload as received, when it decoded as the current schema (no upcast): the audit log
    # stores it as is instead of encoding the event again.
    payload: bytes | None = None


# (event type, schema version header) -> decoder, for the current version of each catalogue type:
# the hot path skips the catalogue and version checks; anything else goes through `decode`.
_CURRENT: dict[tuple[str, str], msgspec.json.Decoder[Event]] = {
    (name, str(cls.schema_version)): msgspec.json.Decoder(cls) for name, cls in CATALOGUE.items()
}


def fact_from(stream: str, delivery: Delivery) -> Fact:
    headers = parse_headers(delivery.headers) if delivery.headers else {}
    event_type = headers.get(H_EVENT_TYPE)
    version = headers.get(H_SCHEMA_VERSION, "")
    occurred_at = headers.get(H_OCCURRED_AT)
    data = delivery.data
    event: Event | UnknownEvent
    if event_type is None or not version.isdigit() or occurred_at is None:
        name = event_type or delivery.subject.rsplit(".", 1)[-1]
        event = UnknownEvent(name, int(version) if version.isdigit() else 0, data, FOREIGN)
        return Fact(stream, delivery.seq, delivery.subject, headers, event, occurred_at, delivery.stored_ns)
    decoder = _CURRENT.get((event_type, version))
    if decoder is not None:
        try:
            event = decoder.decode(data)
        except (msgspec.DecodeError, TypeError, ValueError):
            pass  # `decode` below says why, as an UnknownEvent
        else:
            return Fact(
                stream, delivery.seq, delivery.subject, headers, event, occurred_at, delivery.stored_ns, data
            )
    event = decode(event_type, int(version), data)
    return Fact(stream, delivery.seq, delivery.subject, headers, event, occurred_at, delivery.stored_ns)


def tolerated(event: UnknownEvent) -> bool:
    """Only a foreign message (no ModelForge envelope) is recorded and skipped. Anything with our
    envelope that does not decode halts the projection: an unknown type or a newer schema comes from
    a newer writer (a gateway upgraded first), and skipping it would lose its rows for good, since
    the checkpoint moves past it; a corrupt payload or missing upcaster cannot be applied safely."""
    return event.reason == FOREIGN


def why(event: UnknownEvent) -> str:
    """Why an enveloped event cannot be applied, and what to do about it."""
    if event.reason == UNKNOWN_TYPE or event.reason.startswith(NEWER_SCHEMA):
        return (
            f"{event.reason}: written by a newer ModelForge; upgrade the projector, which then resumes"
            " here and applies it (nothing after it is applied meanwhile)"
        )
    return event.reason
