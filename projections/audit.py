"""One audit-log row per fact, as a line of PostgreSQL COPY text.

This runs once per event on the projector's hot path, so it builds the row with one C-level join:
the free-text fields are checked for COPY's special characters once, together, and the row is
escaped field by field only when one is present (rare: our headers and JSON payloads hold none).
A payload that decoded as the current schema is written as received, not encoded again.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec

from projections import storable
from projections.facts import Fact
from streams.codec import UnknownEvent
from streams.envelope import (
    H_ACTOR,
    H_AGGREGATE_ID,
    H_AGGREGATE_TYPE,
    H_CAUSATION_ID,
    H_CORRELATION_ID,
    H_MSG_ID,
    H_SCHEMA_VERSION,
)
from streams.redaction import REDACTED_TYPES, redacted

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
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_json = msgspec.json.Encoder()
_SECONDS: dict[int, str] = {}  # whole second -> its text; the events of a batch share a few


def _esc(value: str) -> str:
    if "\\" in value or "\t" in value or "\n" in value or "\r" in value:
        value = value.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    return storable.plain(value)


def stored_at(ns: int) -> str:
    """The server's store time (ns since the epoch) as timestamptz input, to the microsecond."""
    seconds, rest = divmod(ns, 1_000_000_000)
    text = _SECONDS.get(seconds)
    if text is None:
        if len(_SECONDS) > 4096:
            _SECONDS.clear()
        text = _SECONDS[seconds] = (_EPOCH + timedelta(seconds=seconds)).strftime("%Y-%m-%d %H:%M:%S")
    return f"{text}.{rest // 1000:06d}+00"


def _payload(fact: Fact) -> tuple[str | None, str, str, str | None]:
    """(payload text, event type, decoded flag, unknown reason) of a fact."""
    event = fact.event
    if isinstance(event, UnknownEvent):
        try:
            msgspec.json.decode(event.data)
            payload: str | None = event.data.decode()
        except (msgspec.DecodeError, UnicodeDecodeError):
            payload = None
        return payload, event.event_type, "f", event.reason
    event_type = type(event).__name__
    if isinstance(event, REDACTED_TYPES):  # key hashes never reach the read model
        payload = _json.encode(redacted(event)).decode()
    elif fact.payload is not None:
        payload = fact.payload.decode()  # as received: it decoded as the current schema, so it is JSON
    else:
        payload = _json.encode(event).decode()
    return payload, event_type, "t", None


def audit_line(fact: Fact) -> str:
    payload, event_type, decoded, reason = _payload(fact)
    h = fact.headers
    headers = _json.encode(h).decode()
    # Every header value is inside `headers` as JSON, where any COPY special character in it (and
    # any NUL, see projections.storable) shows as a backslash; so checking the free-text fields and
    # that JSON covers the whole row.
    probe = f"{fact.subject}{headers}{payload or ''}{reason or ''}"
    if "\\" in probe or "\t" in probe or "\n" in probe or "\r" in probe or "\x00" in probe:
        return _escaped_line(fact, h, headers, payload, event_type, decoded, reason)
    get = h.get
    return "\t".join(
        (
            fact.stream,
            str(fact.seq),
            fact.subject,
            get(H_MSG_ID, "\\N"),
            event_type,
            get(H_SCHEMA_VERSION, "\\N"),
            get(H_AGGREGATE_TYPE, "\\N"),
            get(H_AGGREGATE_ID, "\\N"),
            "\\N" if fact.occurred_at is None else fact.occurred_at,
            stored_at(fact.stored_ns),
            get(H_ACTOR, "\\N"),
            get(H_CORRELATION_ID, "\\N"),
            get(H_CAUSATION_ID, "\\N"),
            headers,
            "\\N" if payload is None else payload,
            decoded,
            "\\N" if reason is None else reason,
        )
    )


def _escaped_line(
    fact: Fact,
    h: dict[str, str],
    headers: str,
    payload: str | None,
    event_type: str,
    decoded: str,
    reason: str | None,
) -> str:
    get = h.get
    headers = storable.json_text(headers)
    payload = None if payload is None else storable.json_text(payload)
    fields = [
        fact.stream,
        str(fact.seq),
        fact.subject,
        get(H_MSG_ID),
        event_type,
        get(H_SCHEMA_VERSION),
        get(H_AGGREGATE_TYPE),
        get(H_AGGREGATE_ID),
        fact.occurred_at,
        stored_at(fact.stored_ns),
        get(H_ACTOR),
        get(H_CORRELATION_ID),
        get(H_CAUSATION_ID),
        headers,
        payload,
        decoded,
        reason,
    ]
    return "\t".join(["\\N" if f is None else _esc(f) for f in fields])
