"""When the projector's next commit may start (`projections.pace.Pace`): the commit interval under
steady traffic, longer as traffic falls, and a quiet spell's first event at once."""

from __future__ import annotations

import pytest

from projections.pace import EVENTS_PER_COMMIT, QUIET_INTERVAL_MAX_S, Pace


def steady(pace: Pace, events_per_s: float, commits: int) -> float:
    """Commit as the projector would under steady traffic; the interval the last commit left."""
    now = pace.next_start
    for _ in range(commits):
        pace.start(max(1, round(events_per_s * (now - pace.started))), now)
        now = pace.next_start
    return pace.interval


def test_the_interval_stays_the_commit_interval_while_a_commit_gathers_enough_events() -> None:
    assert steady(Pace(1.0, 0.0), 2 * EVENTS_PER_COMMIT, 5) == 1.0


@pytest.mark.parametrize("events_per_s", [10.0, 40.0])
def test_the_interval_lengthens_as_traffic_falls_until_a_commit_gathers_enough(events_per_s: float) -> None:
    interval = steady(Pace(1.0, 0.0), events_per_s, 5)

    assert interval == pytest.approx(EVENTS_PER_COMMIT / events_per_s, rel=0.05)


def test_the_interval_is_bounded() -> None:
    assert steady(Pace(1.0, 0.0), 0.5, 5) == QUIET_INTERVAL_MAX_S


def test_a_longer_commit_interval_is_never_shortened() -> None:
    assert steady(Pace(3600.0, 0.0), 0.5, 2) == 3600.0


def test_the_first_event_and_one_after_a_quiet_spell_follow_a_quiet_spell_and_others_do_not() -> None:
    pace = Pace(1.0, 100.0)
    assert pace.quiet(100.0)  # nothing committed yet

    pace.start(2, 100.0)
    assert pace.next_start == 100.0 + QUIET_INTERVAL_MAX_S  # two events after a long wait: a trickle
    assert not pace.quiet(100.5)  # the next request's events wait for the interval
    assert not pace.quiet(101.0)  # a commit interval with nothing committed: still a trickle
    assert pace.quiet(100.0 + QUIET_INTERVAL_MAX_S)  # the longest interval with nothing: a quiet spell
