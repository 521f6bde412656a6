"""Pressure rises at once and falls only after the lower level has held for the stable period."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from sched_builders import POLICY

from gateway.scheduler import Pressure, PressureReading, level_for, next_pressure, refuses_cold_loads
from gateway.scheduler.state import SEVERITY

STABLE = POLICY.pressure_stable_seconds  # 30 s by default
NORMAL_U, ELEVATED_U, HIGH_U, CRITICAL_U = 0.10, 0.75, 0.90, 0.97


def test_levels_follow_the_policy_thresholds() -> None:
    assert level_for(0.0, POLICY) is Pressure.NORMAL
    assert level_for(0.70, POLICY) is Pressure.ELEVATED
    assert level_for(0.85, POLICY) is Pressure.HIGH
    assert level_for(0.95, POLICY) is Pressure.CRITICAL
    assert level_for(1.5, POLICY) is Pressure.CRITICAL


def test_pressure_rises_at_once() -> None:
    reading = next_pressure(PressureReading(), CRITICAL_U, 100.0, POLICY)
    assert reading == PressureReading(level=Pressure.CRITICAL, since=100.0)


def test_pressure_does_not_fall_before_the_stable_period() -> None:
    high = PressureReading(level=Pressure.HIGH, since=0.0)
    reading = next_pressure(high, NORMAL_U, 10.0, POLICY)
    reading = next_pressure(reading, NORMAL_U, 10.0 + STABLE - 0.001, POLICY)
    assert reading.level is Pressure.HIGH


def test_pressure_falls_once_the_lower_level_held_for_the_stable_period() -> None:
    high = PressureReading(level=Pressure.HIGH, since=0.0)
    reading = next_pressure(high, NORMAL_U, 10.0, POLICY)
    reading = next_pressure(reading, NORMAL_U, 10.0 + STABLE, POLICY)
    assert reading == PressureReading(level=Pressure.NORMAL, since=10.0 + STABLE)


def test_a_spike_back_to_the_current_level_restarts_the_stable_period() -> None:
    reading = PressureReading(level=Pressure.HIGH, since=0.0)
    reading = next_pressure(reading, NORMAL_U, 10.0, POLICY)
    reading = next_pressure(reading, HIGH_U, 20.0, POLICY)
    reading = next_pressure(reading, NORMAL_U, 25.0, POLICY)
    reading = next_pressure(reading, NORMAL_U, 10.0 + STABLE, POLICY)
    assert reading.level is Pressure.HIGH
    assert next_pressure(reading, NORMAL_U, 25.0 + STABLE, POLICY).level is Pressure.NORMAL


def test_pressure_falls_to_the_highest_level_seen_while_recovering() -> None:
    reading = PressureReading(level=Pressure.CRITICAL, since=0.0)
    reading = next_pressure(reading, NORMAL_U, 10.0, POLICY)
    reading = next_pressure(reading, ELEVATED_U, 20.0, POLICY)
    reading = next_pressure(reading, NORMAL_U, 10.0 + STABLE, POLICY)
    assert reading.level is Pressure.ELEVATED
    # ...and then on down once NORMAL has held for its own stable period
    assert next_pressure(reading, NORMAL_U, 10.0 + 2 * STABLE, POLICY).level is Pressure.NORMAL


samples = st.lists(
    st.tuples(st.floats(min_value=0.0, max_value=20.0), st.floats(min_value=0.0, max_value=1.0)),
    min_size=1,
    max_size=40,
)


@given(samples)
def test_pressure_hysteresis_rises_at_once_and_falls_only_after_the_stable_period(
    steps: list[tuple[float, float]],
) -> None:
    reading = PressureReading()
    now = 0.0
    history: list[tuple[float, Pressure]] = []  # (time, raw level) of each sample
    for gap, utilisation in steps:
        now += gap
        raw = level_for(utilisation, POLICY)
        history.append((now, raw))
        before = reading.level
        reading = next_pressure(reading, utilisation, now, POLICY)
        after = reading.level
        if SEVERITY[raw] >= SEVERITY[before]:
            assert after is raw  # rises (or holds) at once
        else:
            assert SEVERITY[raw] <= SEVERITY[after] <= SEVERITY[before]
        if SEVERITY[after] < SEVERITY[before]:
            # every sample in the last stable period was below the old level
            window = [level for at, level in history if at >= now - POLICY.pressure_stable_seconds]
            assert all(SEVERITY[level] < SEVERITY[before] for level in window)
            # ...and the run of below-level samples began at least a stable period ago
            run_start = now
            for at, level in reversed(history):
                if SEVERITY[level] >= SEVERITY[before]:
                    break
                run_start = at
            assert now - run_start >= POLICY.pressure_stable_seconds


def test_cold_loads_are_refused_until_critical_has_fallen_away_for_the_stable_period() -> None:
    critical = PressureReading(level=Pressure.CRITICAL, since=0.0)
    below = next_pressure(critical, HIGH_U, 10.0, POLICY)  # the first reading under critical
    assert refuses_cold_loads(below, HIGH_U, 10.0 + STABLE - 0.001, POLICY)
    assert not refuses_cold_loads(below, HIGH_U, 10.0 + STABLE, POLICY)
    # a critical reading meanwhile starts the period again
    again = next_pressure(next_pressure(below, CRITICAL_U, 20.0, POLICY), HIGH_U, 25.0, POLICY)
    assert refuses_cold_loads(again, HIGH_U, 10.0 + STABLE, POLICY)
    assert not refuses_cold_loads(again, HIGH_U, 25.0 + STABLE, POLICY)


def test_critical_utilisation_refuses_cold_loads_whatever_the_booked_level() -> None:
    assert refuses_cold_loads(PressureReading(level=Pressure.NORMAL), CRITICAL_U, 5.0, POLICY)
    assert not refuses_cold_loads(PressureReading(level=Pressure.HIGH), HIGH_U, 5.0, POLICY)


def _refused_by_definition(history: list[tuple[float, float]], now: float) -> bool:
    """Critical now, or fewer than the stable seconds since the first reading under critical that
    followed the last critical one."""
    critical_at = [i for i, (_, u) in enumerate(history) if u >= POLICY.pressure_critical_at]
    if not critical_at:
        return False
    last = critical_at[-1]
    if last == len(history) - 1:
        return True
    return now - history[last + 1][0] < POLICY.pressure_stable_seconds


@given(samples)
def test_cold_loads_are_refused_exactly_while_critical_or_not_yet_stably_below_it(
    steps: list[tuple[float, float]],
) -> None:
    # As the gateway runs it: the upkeep follows each sample with its own reading and books each
    # change of level (PressureChanged: the booked reading, and its next one, start afresh);
    # placement holds the booked reading against the utilisation at the moment of its decision.
    booked = tracked = PressureReading()
    now = 0.0
    history: list[tuple[float, float]] = []
    for gap, utilisation in steps:
        now += gap
        history.append((now, utilisation))
        tracked = next_pressure(tracked, utilisation, now, POLICY)
        if tracked.level is not booked.level:
            booked = tracked = PressureReading(level=tracked.level, since=now)
        refused = refuses_cold_loads(booked, utilisation, now, POLICY)
        assert refused == _refused_by_definition(history, now)
