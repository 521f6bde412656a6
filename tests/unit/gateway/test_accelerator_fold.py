"""The accelerator aggregate's fold: what each event does to the scheduler's view."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gateway.scheduler import (
    ModelEnvelope,
    PlacementRequest,
    ResidencyState,
    Verdict,
    account,
    plan_placement,
)
from gateway.scheduler.policy import SchedulerPolicy
from gateway.state.accelerators import evolve_accelerator, new_accelerator, with_telemetry
from gateway.state.catalog import Catalog, evolve_catalog
from streams.events import serving as s
from streams.events.base import Event
from tests.support.events import catalog_of, lease_granted, residency_loaded, stable_deployment

AT = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
MIB = 1 << 20
ENVELOPE = s.ResourceEnvelope(
    required_bytes=300 * MIB, peak_bytes=200 * MIB, per_request_bytes=16 * MIB, cold_load_ms=900
)
CATALOG = evolve_catalog(Catalog(), stable_deployment("emb", ENVELOPE, s.ResidencyPolicy(kind="always_warm")))


def fold(*events: Event):  # type: ignore[no-untyped-def]
    state = new_accelerator("n1-cpu0", "n1", 4096 * MIB)
    for event in events:
        state = evolve_accelerator(state, event, AT, CATALOG)
    return state


LOAD = s.ResidencyLoadRequested(
    load_id="L1", accelerator_id="n1-cpu0", node_id="n1", deployment_id="emb", required_bytes=900 * MIB
)
LOADED = residency_loaded("L1", "n1-cpu0", measured_bytes=120 * MIB, baseline_bytes=100 * MIB)


def lease(lease_id: str, reserved: int) -> s.LeaseGranted:
    return lease_granted(lease_id, "n1-cpu0", AT, reserved)


def test_a_requested_load_reserves_its_required_bytes_until_measured() -> None:
    state = fold(LOAD)
    assert [r.state for r in state.residents] == [ResidencyState.LOADING]
    assert sum(item.reserved_bytes for item in state.leases) == 900 * MIB


def test_a_loaded_residency_holds_what_the_agent_measured_and_frees_the_reservation() -> None:
    state = fold(LOAD, LOADED)
    (resident,) = state.residents
    assert resident.state is ResidencyState.LOADED
    assert resident.measured_bytes == 120 * MIB
    assert state.leases == ()


def test_residents_take_their_scheduling_attributes_from_the_deployment() -> None:
    (resident,) = fold(LOAD, LOADED).residents
    assert resident.always_warm
    assert resident.reload_cost_ms == 900


def test_a_failed_load_leaves_nothing_behind() -> None:
    failed = s.ResidencyLoadFailed(
        load_id="L1", accelerator_id="n1-cpu0", deployment_id="emb", code="ARTIFACT_NOT_VERIFIED", detail="x"
    )
    state = fold(LOAD, failed)
    assert state.residents == ()
    assert state.leases == ()


def test_leases_count_against_their_resident_until_released() -> None:
    state = fold(LOAD, LOADED, lease("a", 16 * MIB), lease("b", 16 * MIB))
    assert state.residents[0].active_leases == 2
    state = evolve_accelerator(
        state, s.LeaseReleased(lease_id="a", accelerator_id="n1-cpu0", outcome="completed"), AT, CATALOG
    )
    assert state.residents[0].active_leases == 1
    assert [item.lease_id for item in state.leases] == ["b"]


def test_an_unknown_lease_release_changes_nothing() -> None:
    state = fold(LOAD, LOADED)
    after = evolve_accelerator(
        state, s.LeaseReleased(lease_id="nope", accelerator_id="n1-cpu0", outcome="failed"), AT, CATALOG
    )
    assert after == state


def test_a_planned_eviction_stops_new_work_on_its_victims() -> None:
    planned = s.EvictionPlanned(
        eviction_id="e",
        accelerator_id="n1-cpu0",
        victims=("emb",),
        for_deployment_id="other",
        required_bytes=1,
        decision_fingerprint="f",
    )
    state = fold(LOAD, LOADED, planned)
    assert state.residents[0].state is ResidencyState.UNLOADING
    assert state.last_eviction_at == AT.timestamp()


def test_an_unloaded_residency_is_gone_and_a_failed_unload_stays_resident() -> None:
    unloaded = s.ResidencyUnloaded(accelerator_id="n1-cpu0", deployment_id="emb", reclaimed_bytes=120 * MIB)
    assert fold(LOAD, LOADED, unloaded).residents == ()
    failed = s.ResidencyUnloadFailed(
        accelerator_id="n1-cpu0", deployment_id="emb", code="RESIDENCY_UNLOAD_FAILED", detail=""
    )
    assert fold(LOAD, LOADED, failed).residents[0].state is ResidencyState.LOADED


def test_a_sample_taken_before_an_unload_no_longer_counts_the_memory_the_unload_gave_back() -> None:
    unloaded = s.ResidencyUnloaded(accelerator_id="n1-cpu0", deployment_id="emb", reclaimed_bytes=150 * MIB)
    before = with_telemetry(fold(LOAD, LOADED), used_bytes=400 * MIB, observed_at=AT.timestamp() - 0.3)
    after = with_telemetry(fold(LOAD, LOADED), used_bytes=250 * MIB, observed_at=AT.timestamp() + 0.1)

    assert evolve_accelerator(before, unloaded, AT, CATALOG).observed_used_bytes == 250 * MIB
    assert evolve_accelerator(after, unloaded, AT, CATALOG).observed_used_bytes == 250 * MIB  # shows it


def test_a_finished_load_is_when_the_accelerator_last_loaded_a_model() -> None:
    assert fold(LOAD).last_load_at is None  # requested, not loaded yet
    assert fold(LOAD, LOADED).last_load_at == AT.timestamp()


def test_an_unload_that_did_not_free_memory_but_left_no_model_behind_is_gone_from_the_books() -> None:
    failed = s.ResidencyUnloadFailed(
        accelerator_id="n1-cpu0",
        deployment_id="emb",
        code="RESIDENCY_UNLOAD_FAILED",
        detail="unloaded, but memory did not go down (0 bytes)",
        still_resident=False,
    )
    assert fold(LOAD, LOADED, failed).residents == ()


def test_reconciliation_keeps_only_what_the_new_generation_holds() -> None:
    reconciled = s.ResidencyReconciled(accelerator_id="n1-cpu0", generation=2, held=(), dropped=("emb",))
    state = fold(LOAD, LOADED, lease("a", 16 * MIB), reconciled)
    assert state.residents == ()
    assert state.leases == ()


def test_the_view_accounts_resident_and_leased_bytes_with_fresh_telemetry() -> None:
    state = with_telemetry(
        fold(LOAD, LOADED, lease("a", 16 * MIB)), used_bytes=400 * MIB, observed_at=AT.timestamp()
    )
    policy = SchedulerPolicy(safety_reserve_min_bytes=256 * MIB, safety_reserve_fraction=0.0)
    budget = account(state, policy, AT.timestamp() + 1)
    assert budget.resident_bytes == 120 * MIB
    assert budget.leased_bytes == 16 * MIB
    assert budget.external_bytes == 280 * MIB  # 400 observed - 120 attributed
    assert budget.schedulable_bytes == 4096 * MIB - 256 * MIB - 400 * MIB - 16 * MIB


def _unload_of(victim: str, reason: str) -> s.EvictionPlanned:
    """An eviction of `victim` alone that makes room for nobody: an operator's or the upkeep's."""
    return s.EvictionPlanned(
        eviction_id=f"unload-{victim}",
        accelerator_id="n1-cpu0",
        victims=(victim,),
        for_deployment_id="",
        required_bytes=0,
        decision_fingerprint="",
        reason=reason,
    )


def test_an_unload_that_makes_room_for_nobody_starts_no_eviction_cooldown() -> None:
    # The cooldown keeps placement from thrashing models in and out; an operator's unload or drain
    # and the upkeep's unloads are no placement's choice, and must not hold the next one back.
    for reason in ("operator", "drain", "keep_warm_ttl", "artifact_set_unservable"):
        assert fold(LOAD, LOADED, _unload_of("emb", reason)).last_eviction_at is None, reason


def test_a_cold_request_right_after_a_keep_warm_unload_may_still_evict_to_make_room() -> None:
    """Three models of 1.5 GiB on a 4 GiB device: `ttl` (keep-warm) unloaded once idle, then `b`
    loaded into its room; a request for `c` must evict one of the idle others at once, not wait out (or, with a
    deadline shorter than it, be refused REQUEST_TIMEOUT for) a cooldown that no placement began."""
    size = 1536 * MIB
    envelope = s.ResourceEnvelope(required_bytes=size, peak_bytes=size, per_request_bytes=0, cold_load_ms=500)
    catalog = catalog_of(
        *(stable_deployment(name, envelope) for name in ("emb", "b", "c")),
        stable_deployment("ttl", envelope, s.ResidencyPolicy(kind="keep_warm", keep_warm_ttl_s=60)),
    )
    loads = [
        event
        for name in ("emb", "ttl")
        for event in (
            s.ResidencyLoadRequested(
                load_id=f"L-{name}",
                accelerator_id="n1-cpu0",
                node_id="n1",
                deployment_id=name,
                required_bytes=size,
            ),
            residency_loaded(f"L-{name}", "n1-cpu0", measured_bytes=size, deployment_id=name),
        )
    ]
    unloaded = s.ResidencyUnloaded(accelerator_id="n1-cpu0", deployment_id="ttl", reclaimed_bytes=size)
    b_loaded = residency_loaded("L-b", "n1-cpu0", measured_bytes=size, deployment_id="b")
    state = new_accelerator("n1-cpu0", "n1", 4096 * MIB)
    earlier = AT - timedelta(minutes=5)  # the loads: long enough ago to start no cooldown now
    for event in (*loads, b_loaded):
        state = evolve_accelerator(state, event, earlier, catalog)
    for event in (_unload_of("ttl", "keep_warm_ttl"), unloaded):
        state = evolve_accelerator(state, event, AT, catalog)
    now = AT.timestamp() + 1.0
    state = with_telemetry(state, 2 * size, now)
    policy = SchedulerPolicy(
        safety_reserve_min_bytes=0, safety_reserve_fraction=0.0, cold_load_margin_min_bytes=0
    )
    wanted = ModelEnvelope(deployment_id="c", required_bytes=size, peak_bytes=0, cold_load_ms=500)
    decision = plan_placement([state], wanted, PlacementRequest(deadline_ms=30_000), policy, now)
    assert decision.verdict is Verdict.ADMIT_AFTER_EVICTION, decision.reason_codes
    assert len(decision.evictions) == 1  # `emb` or `b`: both idle, used at the same moment


def test_a_sample_names_each_residents_worker_memory_and_a_later_one_without_it_clears_it() -> None:
    loaded = fold(LOAD, LOADED)
    told = with_telemetry(loaded, 400 * MIB, AT.timestamp(), workers={"emb": 180 * MIB})
    assert [r.worker_bytes for r in told.residents] == [180 * MIB]
    silent = with_telemetry(told, 400 * MIB, AT.timestamp() + 1, workers={})
    assert [r.worker_bytes for r in silent.residents] == [0]
