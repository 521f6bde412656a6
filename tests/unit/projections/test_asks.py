"""A reader's ask that the projector commit a sequence now (`projections.wanted.Asks`)."""

from __future__ import annotations

from projections.wanted import ASK_LAPSES_S, Asks


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def asks_on(clock: Clock) -> tuple[Asks, list[None]]:
    asks = Asks("mf", ["MF_EVENTS"], clock)
    heard: list[None] = []
    asks.on_ask = lambda: heard.append(None)
    return asks, heard


def test_an_ask_for_an_event_not_yet_in_a_batch_is_pending() -> None:
    asks, heard = asks_on(Clock())
    asks.heard("mf:MF_EVENTS:12")
    assert asks.pending({"MF_EVENTS": 11})
    assert heard == [None]


def test_an_ask_for_events_already_in_a_batch_is_not_pending() -> None:
    asks, _ = asks_on(Clock())
    asks.heard("mf:MF_EVENTS:12")
    assert not asks.pending({"MF_EVENTS": 12})


def test_an_ask_for_another_schema_or_stream_or_malformed_is_ignored() -> None:
    asks, heard = asks_on(Clock())
    for payload in ("replay_1:MF_EVENTS:12", "mf:MF_REQUESTS:12", "mf:MF_EVENTS:twelve", "nonsense"):
        asks.heard(payload)
    assert not asks.pending({})
    assert heard == []


def test_an_ask_short_of_an_earlier_one_changes_nothing() -> None:
    asks, heard = asks_on(Clock())
    asks.heard("mf:MF_EVENTS:12")
    asks.heard("mf:MF_EVENTS:5")
    assert asks.pending({"MF_EVENTS": 11})
    assert len(heard) == 1


def test_an_ask_lapses_so_one_for_a_sequence_that_never_comes_stops_holding_batching_off() -> None:
    clock = Clock()
    asks, _ = asks_on(clock)
    asks.heard("mf:MF_EVENTS:1000")
    clock.now += ASK_LAPSES_S
    assert not asks.pending({"MF_EVENTS": 3})


def test_an_ask_after_a_lapsed_one_counts_from_itself() -> None:
    clock = Clock()
    asks, heard = asks_on(clock)
    asks.heard("mf:MF_EVENTS:1000")
    clock.now += ASK_LAPSES_S
    asks.heard("mf:MF_EVENTS:7")
    assert asks.pending({"MF_EVENTS": 6})
    assert not asks.pending({"MF_EVENTS": 7})
    assert len(heard) == 2


def test_asks_missed_while_the_listener_was_away_count_as_asked_for_all_until_they_lapse() -> None:
    clock = Clock()
    asks, heard = asks_on(clock)
    asks.missed()
    assert heard == [None]
    assert asks.pending({"MF_EVENTS": 10**12})
    clock.now += ASK_LAPSES_S + 1
    assert not asks.pending({"MF_EVENTS": 0})
