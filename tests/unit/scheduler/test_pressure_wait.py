"""A cold request kept off an accelerator only by CRITICAL pressure waits for it to fall when its
deadline outlasts the earliest recovery, and is refused PRESSURE_CRITICAL, naming the deadline,
when it does not."""

from __future__ import annotations

import msgspec
from hypothesis import given
from hypothesis import strategies as st
from sched_builders import NOW, POLICY, ask, gpu, model, resident

from gateway.scheduler import (
    Pressure,
    PressureReading,
    ReasonCode,
    Verdict,
    next_pressure,
    plan_placement,
    refuses_cold_loads,
)
from gateway.scheduler.pressure import recovery_wait_s
from gateway.serving.errors import rejection

R = ReasonCode
STABLE = POLICY.pressure_stable_seconds  # 30 s by default
LOAD_MS = 2000.0  # the builders' envelope's cold load
# Under critical for 5 s of the 30 s stable period: cold loads may come back in 25 s.
RECOVERING = PressureReading(
    level=Pressure.CRITICAL, since=NOW - 60.0, below_since=NOW - 5.0, below_peak=Pressure.NORMAL
)
RECOVERY_MS = (STABLE - 5.0) * 1000


def test_a_request_whose_deadline_outlasts_the_recovery_and_load_waits_for_pressure_to_fall() -> None:
    decision = plan_placement(
        (gpu(pressure=RECOVERING),), model(), ask(deadline_ms=RECOVERY_MS + LOAD_MS + 1), POLICY, NOW
    )

    assert (decision.verdict, decision.reason_codes) == (Verdict.QUEUE, (R.PRESSURE_CRITICAL,))
    assert decision.wait_ms == RECOVERY_MS
    assert decision.budget is not None
    assert decision.budget.accelerator_id == "gpu-0"


def test_a_request_whose_deadline_ends_before_the_recovery_and_load_is_refused_pressure_critical() -> None:
    decision = plan_placement(
        (gpu(pressure=RECOVERING),), model(), ask(deadline_ms=RECOVERY_MS + LOAD_MS), POLICY, NOW
    )

    assert decision.verdict is Verdict.REJECT_INSUFFICIENT_CAPACITY
    assert decision.reason_codes[:2] == (R.PRESSURE_CRITICAL, R.DEADLINE_EXCEEDED)
    assert decision.wait_ms == RECOVERY_MS


def test_while_utilisation_is_still_critical_the_earliest_recovery_is_a_whole_stable_period() -> None:
    quick = msgspec.structs.replace(POLICY, pressure_stable_seconds=2.0)
    full = gpu(total_gib=10, external_gib=9.8)  # 98 %: critical now, whatever the booked level

    waits = plan_placement(
        (full,), model(required_gib=0.1, peak_gib=0.1), ask(deadline_ms=4001.0), quick, NOW
    )
    refused = plan_placement(
        (full,), model(required_gib=0.1, peak_gib=0.1), ask(deadline_ms=4000.0), quick, NOW
    )

    assert (waits.verdict, waits.wait_ms) == (Verdict.QUEUE, 2000.0)
    assert refused.reason_codes[:2] == (R.PRESSURE_CRITICAL, R.DEADLINE_EXCEEDED)


def test_without_a_deadline_the_policy_longest_queue_wait_bounds_the_wait_for_pressure() -> None:
    waits = plan_placement((gpu(pressure=RECOVERING),), model(), ask(), POLICY, NOW)
    brief = msgspec.structs.replace(POLICY, max_queue_wait_seconds=RECOVERY_MS / 1000)
    refused = plan_placement((gpu(pressure=RECOVERING),), model(), ask(), brief, NOW)

    assert waits.verdict is Verdict.QUEUE
    assert refused.reason_codes[:2] == (R.PRESSURE_CRITICAL, R.DEADLINE_EXCEEDED)


def test_a_load_that_could_never_fit_the_accelerator_does_not_wait_for_its_pressure() -> None:
    decision = plan_placement(
        (gpu(total_gib=8, pressure=RECOVERING),), model(), ask(deadline_ms=600_000.0), POLICY, NOW
    )

    assert decision.verdict is Verdict.REJECT_INSUFFICIENT_CAPACITY
    assert decision.reason_codes == (R.PRESSURE_CRITICAL,)


def test_a_wait_that_ends_in_time_elsewhere_is_preferred_to_pressure_that_does_not() -> None:
    busy = gpu("gpu-b", total_gib=12, residents=(resident("busy", 11, active_leases=1),))
    decision = plan_placement(
        (gpu("gpu-a", pressure=RECOVERING), busy), model(), ask(deadline_ms=10_000.0), POLICY, NOW
    )

    assert decision.verdict is Verdict.QUEUE
    assert decision.budget is not None
    assert decision.budget.accelerator_id == "gpu-b"
    assert R.WAITING_FOR_LEASES in decision.reason_codes


def test_the_refusal_names_the_deadline_and_the_pressure() -> None:
    decision = plan_placement((gpu(pressure=RECOVERING),), model(), ask(deadline_ms=4_000.0), POLICY, NOW)

    error = rejection(decision, "new-model", deadline_ms=4_000.0)

    assert (error.code, error.http_status) == ("PRESSURE_CRITICAL", 503)
    assert "deadline leaves 4000 ms" in error.message
    assert "CRITICAL" in error.message
    assert "25000 ms" in error.message
    assert error.details["deadline_ms"] == 4000
    assert error.details["pressure_wait_ms"] == 25000


samples = st.lists(
    st.tuples(st.floats(min_value=0.01, max_value=20.0), st.floats(min_value=0.0, max_value=1.0)),
    min_size=1,
    max_size=30,
)


@given(samples, samples)
def test_no_continuation_lets_a_cold_load_in_before_the_recovery_wait_and_steady_utilisation_does_at_it(
    before: list[tuple[float, float]], after: list[tuple[float, float]]
) -> None:
    # The reading as the upkeep tracks it from the samples seen so far, then placement's question.
    reading, now = PressureReading(), 0.0
    for gap, utilisation in before:
        now += gap
        reading = next_pressure(reading, utilisation, now, POLICY)
    utilisation = before[-1][1]
    wait = recovery_wait_s(reading, utilisation, now, POLICY)
    assert (wait is None) == (not refuses_cold_loads(reading, utilisation, now, POLICY))
    if wait is None:
        return
    # Whatever the samples that follow, none before `now + wait` lets a cold load in...
    later, then = next_pressure(reading, utilisation, now, POLICY), now
    for gap, next_utilisation in after:
        then += gap
        if then >= now + wait:
            break
        later = next_pressure(later, next_utilisation, then, POLICY)
        assert refuses_cold_loads(later, next_utilisation, then, POLICY)
    # ...and below critical, the same utilisation held until then does let one in at that moment.
    if utilisation < POLICY.pressure_critical_at:
        steady = next_pressure(reading, utilisation, now, POLICY)
        assert not refuses_cold_loads(steady, utilisation, now + wait, POLICY)
