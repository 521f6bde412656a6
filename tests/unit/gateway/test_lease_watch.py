"""A request in flight watches the lease that carries it (`gateway.state.lease_watches`): told when that
lease leaves the books with its node, including a standby lease renewed while the request ran."""

from __future__ import annotations

from datetime import UTC, datetime

from gateway.state.live import LiveState
from streams.events import serving as s
from streams.events.base import Event
from tests.support.events import lease_granted, residency_loaded
from tests.support.records import record

ACCELERATOR = "n1-cpu0"
LATER = datetime(2030, 1, 1, tzinfo=UTC)


def _on_books(live: LiveState, sequence: int, *events: Event) -> None:
    for offset, event in enumerate(events):
        live.apply(record(sequence + offset, "accelerator", ACCELERATOR, event))


def _node_lost(live: LiveState, sequence: int) -> None:
    reconciled = s.ResidencyReconciled(accelerator_id=ACCELERATOR, generation=2, held=(), dropped=("emb",))
    _on_books(live, sequence, reconciled)


def _watching_a_standby_lease() -> tuple[LiveState, list[str]]:
    """A resident with the standby lease `standby-1` on the books, and a request (`request-1`) in
    flight under one of its slots, watching it; what the request is told."""
    live = LiveState()
    _on_books(
        live,
        1,
        residency_loaded("l1", ACCELERATOR, measured_bytes=100),
        lease_granted("standby-1", ACCELERATOR, LATER),
    )
    told: list[str] = []
    live.lease_watches.watch("request-1", lambda: told.append("request-1"), "standby-1")
    return live, told


def test_a_request_under_a_standby_lease_is_told_when_its_node_drops_the_lease() -> None:
    live, told = _watching_a_standby_lease()

    _node_lost(live, 3)

    assert told == ["request-1"]


def test_a_request_under_a_renewed_standby_lease_is_told_when_its_node_drops_the_successor() -> None:
    live, told = _watching_a_standby_lease()
    live.lease_watches.follow("standby-1", "standby-2")  # the renewal, decided
    _on_books(
        live,
        3,
        lease_granted("standby-2", ACCELERATOR, LATER),
        s.LeaseReleased(lease_id="standby-1", accelerator_id=ACCELERATOR, outcome="completed"),
    )

    _node_lost(live, 5)

    assert told == ["request-1"]


def test_a_renewal_decided_but_not_yet_on_the_books_when_the_node_goes_still_tells_the_request() -> None:
    live, told = _watching_a_standby_lease()
    live.lease_watches.follow("standby-1", "standby-2")

    _node_lost(live, 3)

    assert told == ["request-1"]


def test_a_request_whose_watch_ended_is_not_told() -> None:
    live, told = _watching_a_standby_lease()
    live.lease_watches.unwatch("request-1")

    _node_lost(live, 3)

    assert told == []


def test_a_watch_made_just_after_its_leases_renewal_was_decided_follows_the_renewal() -> None:
    live, told = _watching_a_standby_lease()
    live.lease_watches.follow("standby-1", "standby-2")
    live.lease_watches.watch(
        "request-2", lambda: told.append("request-2"), "standby-1"
    )  # took its slot just before
    _on_books(
        live,
        3,
        lease_granted("standby-2", ACCELERATOR, LATER),
        s.LeaseReleased(lease_id="standby-1", accelerator_id=ACCELERATOR, outcome="completed"),
    )

    _node_lost(live, 5)

    assert sorted(told) == ["request-1", "request-2"]
