"""The event catalogue: complete, round-trippable, and evolvable."""

from __future__ import annotations

import msgspec
import pytest

from streams import codec, subjects
from streams.codec import UnknownEvent
from streams.events import AGGREGATE_OF, CATALOGUE, REQUEST_EVENTS, Event
from streams.events.control import ClientCreated
from tests.catalogue_samples import sample


@pytest.mark.parametrize("event_type", sorted(CATALOGUE))
def test_every_catalogue_event_round_trips_through_the_codec(event_type: str) -> None:
    cls = CATALOGUE[event_type]
    event = sample(cls)
    assert codec.decode(event_type, cls.schema_version, codec.encode(event)) == event


def test_every_event_belongs_to_exactly_one_aggregate_or_is_a_request_event() -> None:
    for cls in CATALOGUE.values():
        assert (cls in AGGREGATE_OF) != (cls in REQUEST_EVENTS), cls


def test_every_aggregate_has_events() -> None:
    assert set(AGGREGATE_OF.values()) == set(subjects.Aggregate)


def test_events_are_frozen() -> None:
    event = sample(ClientCreated)
    with pytest.raises(AttributeError):
        event.name = "changed"


def test_a_v1_client_created_is_upcast_to_the_current_schema() -> None:
    v1 = b'{"type":"ClientCreated","client_id":"c1","name":"app","scopes":["rag.embedding@1"],"rpm":30,"concurrency":2}'
    event = codec.decode("ClientCreated", 1, v1)
    assert event == ClientCreated(
        client_id="c1", name="app", scopes=("rag.embedding@1",), requests_per_minute=30, max_concurrency=2
    )


def test_an_unknown_event_type_decodes_as_unknown() -> None:
    result = codec.decode("SpaceshipLaunched", 1, b"{}")
    assert isinstance(result, UnknownEvent)
    assert result.reason == "unknown event type"


def test_an_event_from_a_newer_schema_decodes_as_unknown() -> None:
    result = codec.decode("ClientCreated", 99, codec.encode(sample(ClientCreated)))
    assert isinstance(result, UnknownEvent)
    assert "newer" in result.reason


def test_a_corrupt_payload_decodes_as_unknown() -> None:
    result = codec.decode("ClientDisabled", 1, b'{"client_id": 5')
    assert isinstance(result, UnknownEvent)
    assert result.reason.startswith("undecodable")


def test_new_fields_have_defaults_so_old_payloads_still_decode() -> None:
    # msgspec's evolution rule: a payload without the newer optional fields must decode.
    minimal = b'{"type":"ClientDisabled","client_id":"c1"}'
    assert codec.decode("ClientDisabled", 1, minimal) == CATALOGUE["ClientDisabled"](client_id="c1")


def test_event_types_are_unique_tags() -> None:
    tags = [msgspec.inspect.type_info(cls).tag for cls in CATALOGUE.values()]  # type: ignore[attr-defined]
    assert len(tags) == len(set(tags))
    assert all(issubclass(cls, Event) for cls in CATALOGUE.values())
