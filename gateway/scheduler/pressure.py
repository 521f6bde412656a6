"""Pressure with hysteresis: rises at once, falls only after the lower level held a stable period.

``next_pressure`` is the pure step the accelerator aggregate runs on each telemetry sample (and
placement runs to see the level that applies *now*); a changed ``level`` is a
``PressureChanged`` event. ``refuses_cold_loads`` is the rule placement applies with it, and
``recovery_wait_s`` how long, at the least, a cold load refused by it must wait.
"""

from __future__ import annotations

import math

from gateway.scheduler.policy import SchedulerPolicy
from gateway.scheduler.state import SEVERITY, Pressure, PressureReading


def level_for(utilisation: float, policy: SchedulerPolicy) -> Pressure:
    """The raw (unstabilised) pressure level for a utilisation in ``[0, 1]``."""
    if utilisation >= policy.pressure_critical_at:
        return Pressure.CRITICAL
    if utilisation >= policy.pressure_high_at:
        return Pressure.HIGH
    if utilisation >= policy.pressure_elevated_at:
        return Pressure.ELEVATED
    return Pressure.NORMAL


def next_pressure(
    current: PressureReading, utilisation: float, now: float, policy: SchedulerPolicy
) -> PressureReading:
    """The stabilised reading after observing ``utilisation`` at ``now``.

    Higher level: taken at once.  Same level: any recovery in progress is cancelled.  Lower
    level: remembered; once utilisation has stayed below the current level for
    ``pressure_stable_seconds`` the level falls to the highest level seen in that window.
    """
    candidate = level_for(utilisation, policy)
    rank = SEVERITY[candidate]
    held = SEVERITY[current.level]
    if rank > held:
        return PressureReading(level=candidate, since=now)
    if rank == held:
        if current.below_since is None:
            return current
        return PressureReading(level=current.level, since=current.since)
    below_since = now if current.below_since is None else current.below_since
    peak = candidate
    if current.below_peak is not None and SEVERITY[current.below_peak] > rank:
        peak = current.below_peak
    if now - below_since >= policy.pressure_stable_seconds:
        if peak == candidate:
            return PressureReading(level=peak, since=now)
        return PressureReading(level=peak, since=now, below_since=now, below_peak=candidate)
    return PressureReading(level=current.level, since=current.since, below_since=below_since, below_peak=peak)


def refuses_cold_loads(
    reading: PressureReading, utilisation: float, now: float, policy: SchedulerPolicy
) -> bool:
    """Whether CRITICAL pressure keeps cold loads off an accelerator at ``now``: its utilisation is
    critical, or has not yet stayed below critical for ``pressure_stable_seconds`` since the first
    reading under it. The same hysteresis as ``next_pressure``, so that a cold load does not tip a
    device that has only just recovered straight back over."""
    if reading.level is not Pressure.CRITICAL and utilisation < policy.pressure_critical_at:
        return False  # the common case, without building a reading
    return next_pressure(reading, utilisation, now, policy).level is Pressure.CRITICAL


def recovery_wait_s(
    reading: PressureReading, utilisation: float, now: float, policy: SchedulerPolicy
) -> float | None:
    """The least time from ``now`` until ``refuses_cold_loads`` could let a cold load in (None: it
    does not refuse one now). Still critical: a whole ``pressure_stable_seconds`` (utilisation may
    fall at once, then must stay below critical that long); below critical: the rest of the stable
    period since the first reading under it."""
    if not refuses_cold_loads(reading, utilisation, now, policy):
        return None
    if utilisation >= policy.pressure_critical_at:
        return policy.pressure_stable_seconds
    below_since = next_pressure(reading, utilisation, now, policy).below_since
    start, stable = (now if below_since is None else below_since), policy.pressure_stable_seconds
    wait = max(0.0, start + stable - now)
    while (now + wait) - start < stable:  # rounded short: at `now + wait`, next_pressure lets it fall
        wait = math.nextafter(wait, math.inf)
    return wait
