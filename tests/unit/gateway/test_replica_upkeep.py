"""Replicas in the residency upkeep: `min` copies kept, one more under queue pressure up to `max`,
idle copies beyond `min` unloaded."""

from __future__ import annotations

from gateway.scheduler import DEFAULT_POLICY, AcceleratorState, ResidencyState, Resident
from gateway.serving import replicas, upkeep
from gateway.serving.upkeep import Unload
from gateway.state.catalog import Catalog, evolve_catalog
from streams.events import serving as s
from tests.support.events import stable_deployment

ENVELOPE = s.ResourceEnvelope(required_bytes=100, peak_bytes=120, per_request_bytes=10, cold_load_ms=50)
DEPTH = DEFAULT_POLICY.replica_scale_up_queue_depth
IDLE = DEFAULT_POLICY.replica_idle_seconds


def catalog(low: int, high: int) -> Catalog:
    scaled = s.DeploymentScalingChanged(
        deployment_id="d", replicas=s.Replicas(min=low, max=high), placement="spread"
    )
    return evolve_catalog(evolve_catalog(Catalog(), stable_deployment("d", ENVELOPE)), scaled)


def node(index: int, *residents: Resident) -> AcceleratorState:
    return AcceleratorState(
        accelerator_id=f"a{index}", node_id=f"n{index}", total_bytes=1000, residents=residents
    )


def copy(leases: int = 0, used_at: float = 0.0, state: ResidencyState = ResidencyState.LOADED) -> Resident:
    return Resident(
        deployment_id="d", measured_bytes=100, state=state, active_leases=leases, last_used_at=used_at
    )


def test_a_deployment_asking_for_two_copies_is_short_until_both_are_loaded_or_loading() -> None:
    assert upkeep.warm_missing(catalog(2, 2), [node(1), node(2)]) == ["d"]
    assert upkeep.warm_missing(catalog(2, 2), [node(1, copy()), node(2)]) == ["d"]
    loading = copy(state=ResidencyState.LOADING)
    assert upkeep.warm_missing(catalog(2, 2), [node(1, copy()), node(2, loading)]) == []


def test_one_copy_on_demand_is_not_loaded_by_the_upkeep() -> None:
    assert upkeep.warm_missing(catalog(1, 3), [node(1), node(2)]) == []


def test_a_copy_serving_its_depth_of_requests_wants_another_up_to_max() -> None:
    assert replicas.wanting_more(catalog(1, 2), [node(1, copy(DEPTH - 1)), node(2)], DEFAULT_POLICY, {}) == []
    assert replicas.wanting_more(
        catalog(1, 2), [node(1, copy(DEPTH - 1)), node(2)], DEFAULT_POLICY, {"d": 1}
    ) == ["d"]
    two = [node(1, copy(DEPTH)), node(2, copy(DEPTH))]
    assert replicas.wanting_more(catalog(1, 2), two, DEFAULT_POLICY, {}) == []  # max reached


def test_no_further_copy_while_one_is_still_loading() -> None:
    busy = [node(1, copy(DEPTH * 3)), node(2, copy(state=ResidencyState.LOADING)), node(3)]
    assert replicas.wanting_more(catalog(1, 3), busy, DEFAULT_POLICY, {}) == []


def test_idle_copies_beyond_min_are_unloaded_longest_idle_first_and_min_stays() -> None:
    fleet = [node(1, copy(used_at=10.0)), node(2, copy(used_at=5.0)), node(3, copy(used_at=20.0))]
    now = 20.0 + IDLE
    assert replicas.idle_extras(catalog(1, 3), fleet, DEFAULT_POLICY, now) == [
        Unload("a2", "n2", "d"),
        Unload("a1", "n1", "d"),
    ]
    assert replicas.idle_extras(catalog(2, 3), fleet, DEFAULT_POLICY, now) == [Unload("a2", "n2", "d")]


def test_a_busy_or_recently_used_copy_is_not_unloaded_and_its_idle_time_is_the_next_due() -> None:
    fleet = [node(1, copy(leases=1)), node(2, copy(used_at=100.0))]
    assert replicas.idle_extras(catalog(1, 2), fleet, DEFAULT_POLICY, 100.0 + IDLE - 1) == []
    assert replicas.next_idle_extra_due(catalog(1, 2), fleet, DEFAULT_POLICY) == 100.0 + IDLE
    assert replicas.next_idle_extra_due(catalog(2, 2), fleet, DEFAULT_POLICY) is None
