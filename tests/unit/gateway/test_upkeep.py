"""Upkeep decisions: always-warm loads, keep-warm TTL unloads, lease expiry, pressure levels."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec

from gateway.scheduler import (
    DEFAULT_POLICY,
    AcceleratorState,
    Lease,
    Pressure,
    PressureReading,
    ResidencyState,
    Resident,
    refuses_cold_loads,
)
from gateway.serving import upkeep
from gateway.state.catalog import Catalog, evolve_catalog
from gateway.state.loads import LOAD_RETRY_S, LoadFailure, failed_recently
from streams.events import serving as s
from tests.support.events import lease_granted, stable_deployment

ENVELOPE = s.ResourceEnvelope(required_bytes=100, peak_bytes=120, per_request_bytes=10, cold_load_ms=50)


def catalog_with(kind: str, ttl: float = 0.0) -> Catalog:
    residency = s.ResidencyPolicy(kind=kind, keep_warm_ttl_s=ttl)  # type: ignore[arg-type]
    return evolve_catalog(Catalog(), stable_deployment("d", ENVELOPE, residency))


def accelerator(*residents: Resident, leases: tuple[Lease, ...] = ()) -> AcceleratorState:
    return AcceleratorState(
        accelerator_id="a1", node_id="n1", total_bytes=1000, residents=residents, leases=leases
    )


def test_an_always_warm_deployment_resident_nowhere_is_missing() -> None:
    assert upkeep.warm_missing(catalog_with("always_warm"), [accelerator()]) == ["d"]


def test_an_always_warm_deployment_that_is_loading_is_not_missing() -> None:
    loading = Resident(deployment_id="d", measured_bytes=0, state=ResidencyState.LOADING)
    assert upkeep.warm_missing(catalog_with("always_warm"), [accelerator(loading)]) == []


def test_an_always_warm_deployment_whose_load_failed_is_tried_again_only_after_the_retry_wait() -> None:
    failed = s.ResidencyLoadFailed(load_id="l", accelerator_id="a1", deployment_id="d", code="X", detail="")
    catalog, failed_at = catalog_with("always_warm"), {"d": LoadFailure(failed, 100.0)}
    assert upkeep.warm_missing(catalog, [accelerator()], failed_at, 100.0 + LOAD_RETRY_S - 1) == []
    assert upkeep.next_warm_retry(catalog, failed_at, 101.0) == 100.0 + LOAD_RETRY_S
    assert upkeep.warm_missing(catalog, [accelerator()], failed_at, 100.0 + LOAD_RETRY_S) == ["d"]
    assert upkeep.next_warm_retry(catalog, failed_at, 100.0 + LOAD_RETRY_S) is None


def test_on_demand_deployments_are_never_loaded_by_upkeep() -> None:
    assert upkeep.warm_missing(catalog_with("on_demand"), [accelerator()]) == []


def test_a_keep_warm_resident_is_due_once_idle_for_its_ttl() -> None:
    idle = Resident(deployment_id="d", measured_bytes=50, last_used_at=100.0)
    catalog = catalog_with("keep_warm", ttl=30.0)
    assert upkeep.idle_past_ttl(catalog, [accelerator(idle)], now=129.0) == []
    assert upkeep.idle_past_ttl(catalog, [accelerator(idle)], now=130.0) == [upkeep.Unload("a1", "n1", "d")]
    assert upkeep.next_ttl_due(catalog, [accelerator(idle)]) == 130.0


def test_a_busy_keep_warm_resident_is_never_due() -> None:
    busy = Resident(deployment_id="d", measured_bytes=50, last_used_at=0.0, active_leases=1)
    catalog = catalog_with("keep_warm", ttl=1.0)
    assert upkeep.idle_past_ttl(catalog, [accelerator(busy)], now=1e9) == []
    assert upkeep.next_ttl_due(catalog, [accelerator(busy)]) is None


def test_only_leases_still_on_the_books_past_their_expiry_expire() -> None:
    state = accelerator(leases=(Lease(lease_id="L1", deployment_id="d", reserved_bytes=5),))
    at = {lease_id: datetime.fromtimestamp(t, UTC) for lease_id, t in (("L1", 10.0), ("L2", 5.0))}
    grants = {i: lease_granted(i, "a1", t) for i, t in at.items()}  # L2 is no longer on the books
    assert upkeep.expired({"a1": state}, grants, now=9.0) == []
    assert upkeep.expired({"a1": state}, grants, now=10.0) == [grants["L1"]]
    assert upkeep.next_lease_expiry(grants) == 5.0


POLICY = DEFAULT_POLICY  # pressure: elevated at 0.70, high 0.85, critical 0.95; stable for 30 s


def used(fraction: float, booked: Pressure = Pressure.NORMAL) -> AcceleratorState:
    """An accelerator whose telemetry shows `fraction` of it in use, with `booked` on the books."""
    return AcceleratorState(
        accelerator_id="a1",
        node_id="n1",
        total_bytes=1000,
        observed_used_bytes=int(fraction * 1000),
        observed_at=0.0,
        pressure=PressureReading(level=booked),
    )


def test_pressure_is_booked_at_once_when_utilisation_rises() -> None:
    tracks, steps = upkeep.track_pressure([used(0.96)], {}, POLICY, now=10.0)
    assert steps == [upkeep.PressureStep("a1", Pressure.NORMAL, Pressure.CRITICAL, 0.96)]
    assert tracks["a1"].reading.level is Pressure.CRITICAL


def test_pressure_falls_only_after_the_lower_level_held_for_the_stable_period() -> None:
    tracks, _ = upkeep.track_pressure([used(0.96)], {}, POLICY, now=10.0)
    critical = used(0.50, booked=Pressure.CRITICAL)  # the change above, now on the books
    tracks, steps = upkeep.track_pressure([critical], tracks, POLICY, now=11.0)
    assert steps == []
    assert upkeep.next_pressure_due(tracks, POLICY) == 41.0
    tracks, steps = upkeep.track_pressure([critical], tracks, POLICY, now=40.9)
    assert steps == []
    _, steps = upkeep.track_pressure([critical], tracks, POLICY, now=41.0)
    assert steps == [upkeep.PressureStep("a1", Pressure.CRITICAL, Pressure.NORMAL, 0.5)]


def test_a_level_another_replica_booked_restarts_this_replicas_track() -> None:
    tracks, _ = upkeep.track_pressure([used(0.96)], {}, POLICY, now=10.0)
    tracks, _ = upkeep.track_pressure([used(0.50, booked=Pressure.CRITICAL)], tracks, POLICY, now=11.0)
    # Another replica booked NORMAL; this one must not put CRITICAL back from its stale track.
    _, steps = upkeep.track_pressure([used(0.50, booked=Pressure.NORMAL)], tracks, POLICY, now=12.0)
    assert steps == []


def test_an_accelerator_without_fresh_telemetry_gets_no_pressure() -> None:
    stale = msgspec.structs.replace(used(0.96), available=False)
    assert upkeep.track_pressure([stale], {}, POLICY, now=10.0) == ({}, [])


def test_a_cold_load_avoids_where_the_agent_failed_the_deployments_load_until_it_may_be_tried_again() -> None:
    failed = s.ResidencyLoadFailed(
        load_id="l", accelerator_id="n1-gpu0", deployment_id="d", code="RESIDENCY_LOAD_FAILED", detail="x"
    )
    failures = {"d": LoadFailure(failed, 100.0, by_agent=True)}
    assert failed_recently(failures, "d", 100.0 + LOAD_RETRY_S - 1) == ("n1-gpu0",)
    assert failed_recently({"d": LoadFailure(failed, 100.0)}, "d", 101.0) == ()  # not sent: no backoff
    assert failed_recently(failures, "d", 100.0 + LOAD_RETRY_S) == ()
    assert failed_recently(failures, "other", 101.0) == ()


def test_placement_sees_this_replicas_recovery_and_admits_cold_loads_the_moment_it_has_held() -> None:
    tracks, _ = upkeep.track_pressure([used(0.96)], {}, POLICY, now=10.0)
    critical = used(0.50, booked=Pressure.CRITICAL)
    tracks, _ = upkeep.track_pressure([critical], tracks, POLICY, now=11.0)  # below since 11 s
    (seen,) = upkeep.with_tracked_pressure([critical], tracks)
    assert refuses_cold_loads(seen.pressure, 0.50, 40.9, POLICY)
    assert not refuses_cold_loads(seen.pressure, 0.50, 41.0, POLICY)
    # The booked reading alone holds cold loads off until the upkeep's next round books the fall.
    assert refuses_cold_loads(critical.pressure, 0.50, 41.0, POLICY)


def test_a_track_of_a_level_no_longer_on_the_books_is_not_used() -> None:
    tracks, _ = upkeep.track_pressure([used(0.96)], {}, POLICY, now=10.0)
    tracks, _ = upkeep.track_pressure([used(0.50, booked=Pressure.CRITICAL)], tracks, POLICY, now=11.0)
    fallen = used(0.50)  # another replica booked the fall meanwhile
    assert upkeep.with_tracked_pressure([fallen], tracks) == [fallen]
