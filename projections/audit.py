"""One audit-log row per fact, as a line of PostgreSQL COPY text.

This runs once per event on the projector's hot path, so it builds the row with C-level joins:
the fields are checked for COPY's special characters once, together, and escaped one by one
only when one is present (rare: our headers and JSON payloads hold none).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec

from projections.facts import Fact
from streams.codec import UnknownEvent

AUDIT_COLUMNS = (
    "stream",
    "seq",
    "subject",
    "event_id",
    "event_type",
    "schema_version",
    "aggregate_type",
    "aggregate_id",
    "occurred_at",
    "stored_at",
    "actor",
    "correlation_id",
    "causation_id",
    "headers",
    "payload",
    "decoded",
    "unknown_reason",
)
_REDACT = {"CredentialIssued", "CredentialRotated"}  # key hashes never reach the read model
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_json = msgspec.json.Encoder()
_SECONDS: dict[int, str] = {}  # whole second -> its text; the events of a batch share a few


def _esc(value: str) -> str:
    if "\\" in value or "\t" in value or "\n" in value or "\r" in value:
        value = value.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    return value


def stored_at(ns: int) -> str:
    """The server's store time (ns since the epoch) as timestamptz input, to the microsecond."""
    seconds, micros = divmod(ns // 1000, 1_000_000)
    text = _SECONDS.get(seconds)
    if text is None:
        if len(_SECONDS) > 4096:
            _SECONDS.clear()
        text = _SECONDS[seconds] = (_EPOCH + timedelta(seconds=seconds)).strftime("%Y-%m-%d %H:%M:%S")
    return f"{text}.{micros:06d}+00"


def audit_line(fact: Fact) -> str:
    h, event = fact.headers, fact.event
    if isinstance(event, UnknownEvent):
        try:
            msgspec.json.decode(event.data)
            payload: str | None = event.data.decode()
        except (msgspec.DecodeError, UnicodeDecodeError):
            payload = None
        decoded, reason, event_type = "f", event.reason, event.event_type
    else:
        event_type = type(event).__name__
        if event_type in _REDACT:
            payload = _json.encode(msgspec.structs.replace(event, key_sha256="<redacted>")).decode()
        else:
            payload = _json.encode(event).decode()
        decoded, reason = "t", None
    get = h.get
    fields = [
        fact.stream,
        str(fact.seq),
        fact.subject,
        get("Nats-Msg-Id"),
        event_type,
        get("Mf-Schema-Version"),
        get("Mf-Aggregate-Type"),
        get("Mf-Aggregate-Id"),
        fact.occurred_at,
        stored_at(fact.stored_ns),
        get("Mf-Actor"),
        get("Mf-Correlation-Id"),
        get("Mf-Causation-Id"),
        _json.encode(h).decode(),
        payload,
        decoded,
        reason,
    ]
    present = "".join([f for f in fields if f])
    if "\\" in present or "\t" in present or "\n" in present or "\r" in present:
        return "\t".join(["\\N" if f is None else _esc(f) for f in fields])
    return "\t".join(["\\N" if f is None else f for f in fields])
