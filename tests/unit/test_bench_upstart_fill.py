"""bench.upstart fills a real home's log: its traffic must speak for that home's own ids only and
leave its aggregates as a real history would (every lease released, the pressure level untouched)."""

from __future__ import annotations

import itertools

from bench.upstart import Home, home_traffic
from streams.events import requests as r
from streams.events import serving as s
from streams.subjects import Aggregate

HOME = Home(node="local", accelerator="cpu0", deployment="dep-real", client="cl_demo")
NAMED = {"node_id": HOME.node, "accelerator_id": HOME.accelerator, "deployment_id": HOME.deployment}


def _items(requests: int = 1_000) -> list[tuple[Aggregate | None, str, object]]:
    """Whole requests: up to the acceptance of the `requests + 1`-th."""
    accepted = itertools.accumulate(isinstance(e, r.RequestAccepted) for _, _, e in home_traffic(HOME, "t"))
    items = zip(home_traffic(HOME, "t"), accepted, strict=False)
    return [item for item, count in itertools.takewhile(lambda pair: pair[1] <= requests, items)]


def test_every_event_names_only_the_homes_ids() -> None:
    for aggregate, owner, event in _items():
        if aggregate is Aggregate.ACCELERATOR:
            assert owner == HOME.accelerator
        for field, value in {**NAMED, "client_id": HOME.client}.items():
            assert getattr(event, field, value) == value


def test_every_lease_granted_is_released_and_no_pressure_changes() -> None:
    events = [event for _, _, event in _items()]
    granted = {e.lease_id for e in events if isinstance(e, s.LeaseGranted)}
    released = {e.lease_id for e in events if isinstance(e, s.LeaseReleased)}
    assert granted
    assert granted == released
    assert not any(isinstance(e, s.PressureChanged) for e in events)
