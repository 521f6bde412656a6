"""Pressure rises at once and falls only after the lower level has held for the stable period."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from sched_builders import POLICY

from gateway.scheduler import Pressure, PressureReading, level_for, next_pressure
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
