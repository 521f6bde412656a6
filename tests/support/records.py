"""Recorded events for unit tests of folds: an event as the log would hand it out."""

from __future__ import annotations

from datetime import UTC, datetime

from eventstore.records import RecordedEvent
from streams.envelope import SYSTEM, Envelope
from streams.events.base import Event


def record(sequence: int, aggregate: str, aggregate_id: str, event: Event) -> RecordedEvent:
    """`event` stored at `sequence` on `aggregate`/`aggregate_id` (subject without the event type)."""
    envelope = Envelope(
        event_id=f"e{sequence}",
        event_type=type(event).event_type(),
        schema_version=1,
        aggregate_type=aggregate,
        aggregate_id=aggregate_id,
        occurred_at=datetime(2026, 12, 1, tzinfo=UTC),
        actor=SYSTEM,
    )
    return RecordedEvent(sequence, f"mf.evt.{aggregate}.{aggregate_id}", envelope, event)
