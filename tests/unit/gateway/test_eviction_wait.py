"""Waiting for an eviction ends when each victim's unload has ended, however it ended."""

from __future__ import annotations

from gateway.scheduler import AcceleratorState, ResidencyState, Resident
from gateway.serving.loading import unloads_pending


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
