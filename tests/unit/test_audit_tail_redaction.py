"""`audit tail` shows events as the read model's audit log does: never a credential's key hash."""

from __future__ import annotations

import msgspec
import pytest

from eventstore.audit import format_json, format_line
from eventstore.records import RecordedEvent
from eventstore.store import prepare
from streams.envelope import SYSTEM
from streams.events import control as c
from streams.events.base import Event
from streams.subjects import Aggregate
from tests.support.events import KEY_HASH, credential_events


def recorded(event: Event) -> RecordedEvent:
    (out,) = prepare([event], Aggregate.CLIENT, "c", SYSTEM, None, None)
    return RecordedEvent(7, out.subject, None, event)


@pytest.mark.parametrize("event", credential_events(), ids=["issued", "rotated"])
def test_audit_tail_redacts_a_credentials_key_hash_in_lines_and_json(event: Event) -> None:
    for text in (format_line(recorded(event)), format_json(recorded(event)).decode()):
        assert KEY_HASH not in text
        assert "<redacted>" in text
        assert event.key_prefix in text  # type: ignore[attr-defined]


def test_audit_tail_shows_other_events_whole() -> None:
    enabled = c.ClientEnabled(client_id="c")
    assert format_line(recorded(enabled)).endswith(msgspec.json.encode(enabled).decode())
