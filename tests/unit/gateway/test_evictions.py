"""An eviction ends when each victim's unload has ended, however it ended: the wait for it stops,
and the upkeep records what it reclaimed."""

from __future__ import annotations

from gateway.scheduler import AcceleratorState, ResidencyState, Resident
from gateway.state.evictions import (
    PendingEviction,
    evicting_for,
    evictions_ended,
    fold_evictions,
    next_unload_due,
    unloads_overdue,
    unloads_pending,
)
from streams.events import serving as s


def on_accelerator(*residents: Resident) -> AcceleratorState:
    return AcceleratorState(accelerator_id="a1", node_id="n1", total_bytes=1000, residents=residents)


def test_a_victim_still_unloading_keeps_the_eviction_pending() -> None:
    unloading = Resident(deployment_id="old", measured_bytes=100, state=ResidencyState.UNLOADING)
    assert unloads_pending(on_accelerator(unloading), {"old"}) == {"old"}


def test_a_victim_gone_or_back_to_loaded_after_a_failed_unload_ends_the_wait() -> None:
    failed = Resident(deployment_id="stuck", measured_bytes=100, state=ResidencyState.LOADED)
    assert unloads_pending(on_accelerator(failed), {"old", "stuck"}) == set()


def test_residents_that_are_not_victims_do_not_count() -> None:
    other = Resident(deployment_id="other", measured_bytes=100, state=ResidencyState.UNLOADING)
    assert unloads_pending(on_accelerator(other), {"old"}) == set()


def planned(eviction_id: str = "e1", victims: tuple[str, ...] = ("old", "older")) -> s.EvictionPlanned:
    return s.EvictionPlanned(
        eviction_id=eviction_id,
        accelerator_id="a1",
        victims=victims,
        for_deployment_id="new",
        required_bytes=300,
        decision_fingerprint="f",
    )


def unloaded(deployment_id: str, reclaimed: int, accelerator_id: str = "a1") -> s.ResidencyUnloaded:
    return s.ResidencyUnloaded(
        accelerator_id=accelerator_id, deployment_id=deployment_id, reclaimed_bytes=reclaimed
    )


def test_each_victims_unload_credits_the_eviction_with_what_it_gave_back() -> None:
    pending: dict[str, PendingEviction] = {}
    for event in (planned(), unloaded("old", 100), unloaded("older", 50), unloaded("bystander", 7)):
        fold_evictions(pending, event, 0.0)
    assert pending["e1"].reclaimed_bytes == 150


def test_an_unload_on_another_accelerator_credits_nothing() -> None:
    pending: dict[str, PendingEviction] = {}
    for event in (planned(), unloaded("old", 100, accelerator_id="a2")):
        fold_evictions(pending, event, 0.0)
    assert pending["e1"].reclaimed_bytes == 0


def test_a_completed_eviction_is_no_longer_under_way() -> None:
    pending: dict[str, PendingEviction] = {}
    fold_evictions(pending, planned(), 0.0)
    assert evicting_for(pending, "new")
    fold_evictions(
        pending, s.EvictionCompleted(eviction_id="e1", accelerator_id="a1", reclaimed_bytes=0), 0.0
    )
    assert pending == {}
    assert not evicting_for(pending, "new")


def test_a_victims_unload_reported_twice_counts_once() -> None:
    pending: dict[str, PendingEviction] = {}
    for event in (planned(), unloaded("old", 100), unloaded("old", 100)):
        fold_evictions(pending, event, 0.0)
    assert pending["e1"].reclaimed_bytes == 100


def test_an_eviction_none_of_whose_victims_unloaded_ends_failed() -> None:
    pending = {"e1": PendingEviction(planned())}
    back = Resident(deployment_id="old", measured_bytes=50, state=ResidencyState.LOADED)
    (ended,) = evictions_ended(pending, {"a1": on_accelerator(back)})
    assert (ended.outcome, ended.reclaimed_bytes) == ("failed", 0)


def test_an_eviction_ends_once_no_victim_is_still_unloading() -> None:
    pending = {"e1": PendingEviction(planned(), reclaimed_bytes=100, unloaded=frozenset({"old"}))}
    stuck = Resident(deployment_id="older", measured_bytes=50, state=ResidencyState.UNLOADING)
    assert evictions_ended(pending, {"a1": on_accelerator(stuck)}) == []
    back = Resident(deployment_id="older", measured_bytes=50, state=ResidencyState.LOADED)
    assert evictions_ended(pending, {"a1": on_accelerator(back)}) == [
        s.EvictionCompleted(eviction_id="e1", accelerator_id="a1", reclaimed_bytes=100)
    ]


def test_a_victim_still_unloading_when_the_unload_timeout_passes_goes_back_on_the_books() -> None:
    pending = {"e1": PendingEviction(planned(), planned_at=1_000.0)}
    stuck = Resident(deployment_id="older", measured_bytes=50, state=ResidencyState.UNLOADING)
    gone = {"a1": on_accelerator(stuck)}
    assert unloads_overdue(pending, gone, now=1_299.0, timeout_s=300) == []
    (back,) = unloads_overdue(pending, gone, now=1_300.0, timeout_s=300)
    assert (back.deployment_id, back.code) == ("older", "GPU_MEMORY_NOT_RECLAIMED")
    assert next_unload_due(pending, 300) == 1_300.0
