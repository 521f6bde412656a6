"""Revising the scheduler policy: a revision the scheduler cannot keep its promises under is
refused naming the setting; the stored settings are not changed."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.scheduler.accounting import safety_reserve
from gateway.scheduler.policy import GIB, PolicyInvalid, policy_of, revise


@pytest.mark.parametrize(
    ("changes", "setting"),
    [
        ({"safety_reserve_min_bytes": -GIB}, "safety_reserve_min_bytes"),
        ({"safety_reserve_fraction": 1.5}, "safety_reserve_fraction"),
        ({"cold_load_margin_fraction": -0.1}, "cold_load_margin_fraction"),
        ({"runtime_margin_bytes": -1}, "runtime_margin_bytes"),
        ({"pressure_elevated_at": 0.9}, "pressure_high_at"),  # above high (0.85): out of order
        ({"pressure_elevated_at": 0}, "pressure_elevated_at"),
        ({"pressure_critical_at": 1.2}, "pressure_critical_at"),
        ({"global_queue_limit": 0}, "global_queue_limit"),
        ({"global_queue_limit": 2.5}, "global_queue_limit"),
        ({"replica_scale_up_queue_depth": 0}, "replica_scale_up_queue_depth"),
        ({"replica_idle_seconds": -1}, "replica_idle_seconds"),
        ({"max_queue_wait_seconds": 0}, "max_queue_wait_seconds"),
        ({"load_timeout_seconds": -5}, "load_timeout_seconds"),
        ({"telemetry_fresh_seconds": 0}, "telemetry_fresh_seconds"),
        ({"eviction_cooldown_seconds": -1}, "eviction_cooldown_seconds"),
        ({"safety_reserve_fraction": float("nan")}, "safety_reserve_fraction"),
        ({"unload_timeout_seconds": float("inf")}, "unload_timeout_seconds"),
        ({"global_queue_limit": True}, "global_queue_limit"),
        ({"cold_load_requires_known_attribution": 0.0}, "cold_load_requires_known_attribution"),
        ({"no_such_setting": 1.0}, "no_such_setting"),
    ],
)
def test_a_setting_out_of_its_range_is_refused_by_name(
    changes: dict[str, float | bool], setting: str
) -> None:
    with pytest.raises(PolicyInvalid) as refused:
        revise({}, changes)
    assert refused.value.setting == setting


def test_thresholds_are_judged_with_the_settings_already_in_force() -> None:
    stored = revise({}, {"pressure_high_at": 0.6, "pressure_elevated_at": 0.5})
    with pytest.raises(PolicyInvalid) as refused:
        revise(stored, {"pressure_critical_at": 0.55})
    assert refused.value.setting == "pressure_critical_at"


def test_a_switch_is_revised_with_a_boolean_and_read_back_as_one() -> None:
    stored = revise({}, {"cold_load_requires_known_attribution": False, "global_queue_limit": 8})
    policy = policy_of(stored, 3)
    assert policy.cold_load_requires_known_attribution is False
    assert policy.global_queue_limit == 8
    assert policy.revision == 3


numbers = st.floats(min_value=-4.0 * GIB, max_value=4.0 * GIB, allow_nan=False)


@given(
    minimum=st.integers(min_value=-4 * GIB, max_value=4 * GIB),
    fraction=st.one_of(numbers, st.floats(min_value=-2, max_value=2)),
    total=st.integers(min_value=1, max_value=200 * GIB),
)
def test_an_accepted_reserve_never_makes_memory_out_of_nothing(
    minimum: int, fraction: float, total: int
) -> None:
    """Whatever an operator asks, a policy that is accepted reserves no negative amount: an empty
    card never has more schedulable memory than it holds."""
    try:
        stored = revise({}, {"safety_reserve_min_bytes": minimum, "safety_reserve_fraction": fraction})
    except PolicyInvalid:
        return
    assert safety_reserve(total, policy_of(stored, 1)) >= 0
