"""Encoding events to bytes and back, with upcasting and a typed "unknown event".

A reader never crashes on a foreign or newer message: it gets an `UnknownEvent` and must decide.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import msgspec

from streams.events import CATALOGUE, Event
from streams.events.upcasters import UPCASTERS


class UnknownEvent(msgspec.Struct, frozen=True):
    """A message on an event subject this code cannot decode: a foreign publisher, a newer
    writer, or a corrupt payload. `reason` says which."""

    event_type: str
    schema_version: int
    data: bytes
    reason: str


UNKNOWN_TYPE = "unknown event type"
NEWER_SCHEMA = "written by a newer schema"
_encoder = msgspec.json.Encoder()


def encode(event: Event) -> bytes:
    return _encoder.encode(event)


@cache
def _decoder(cls: type[Event]) -> msgspec.json.Decoder[Event]:
    return msgspec.json.Decoder(cls)


def decode(event_type: str, schema_version: int, data: bytes) -> Event | UnknownEvent:
    cls = CATALOGUE.get(event_type)
    if cls is None:
        return UnknownEvent(event_type, schema_version, data, UNKNOWN_TYPE)
    current = cls.schema_version
    if schema_version > current:
        return UnknownEvent(event_type, schema_version, data, f"{NEWER_SCHEMA} (v{current} here)")
    try:
        if schema_version == current:
            return _decoder(cls).decode(data)
        raw: dict[str, Any] = msgspec.json.decode(data)
        for version in range(schema_version, current):
            step = UPCASTERS.get((event_type, version))
            if step is None:
                return UnknownEvent(event_type, schema_version, data, f"no upcaster from v{version}")
            raw = step(raw)
        return msgspec.convert(raw, cls)
    except (msgspec.DecodeError, msgspec.ValidationError, TypeError, ValueError) as exc:
        return UnknownEvent(event_type, schema_version, data, f"undecodable: {exc}")
