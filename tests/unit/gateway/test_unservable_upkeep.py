"""Upkeep unloads the idle residents of a deployment whose artifact set is quarantined (routing
passes it by) and does not load it again while so, whatever its residency policy."""

from __future__ import annotations

import pytest

from gateway.scheduler import ResidencyState, Resident
from gateway.serving import upkeep
from gateway.state.catalog import Catalog
from streams.events import serving as s
from streams.events.base import Event
from tests.support.events import catalog_of, stable_deployment
from tests.unit.gateway.test_artifact_routing import ENVELOPE, QUARANTINED, REGISTERED
from tests.unit.gateway.test_upkeep import accelerator


def catalog(kind: str, *events: Event) -> Catalog:
    residency = s.ResidencyPolicy(kind=kind)  # type: ignore[arg-type]
    return catalog_of(REGISTERED, stable_deployment("d", ENVELOPE, residency), *events)


def resident(active_leases: int = 0, state: ResidencyState = ResidencyState.LOADED) -> Resident:
    return Resident(
        deployment_id="d", measured_bytes=100, last_used_at=5.0, active_leases=active_leases, state=state
    )


@pytest.mark.parametrize("kind", ["on_demand", "keep_warm", "always_warm"])
def test_an_idle_resident_of_a_quarantined_set_is_unloaded(kind: str) -> None:
    quarantined = catalog(kind, QUARANTINED)
    assert upkeep.unservable_idle(quarantined, [accelerator(resident())]) == [upkeep.Unload("a1", "n1", "d")]


def test_a_resident_of_a_servable_set_is_left_loaded() -> None:
    assert upkeep.unservable_idle(catalog("on_demand"), [accelerator(resident())]) == []


def test_a_busy_or_loading_resident_of_a_quarantined_set_waits() -> None:
    quarantined = catalog("on_demand", QUARANTINED)
    busy, loading = resident(active_leases=1), resident(state=ResidencyState.LOADING)
    assert upkeep.unservable_idle(quarantined, [accelerator(busy)]) == []
    assert upkeep.unservable_idle(quarantined, [accelerator(loading)]) == []


def test_an_always_warm_deployment_of_a_quarantined_set_is_not_loaded_again() -> None:
    assert upkeep.warm_missing(catalog("always_warm"), [accelerator()]) == ["d"]
    assert upkeep.warm_missing(catalog("always_warm", QUARANTINED), [accelerator()]) == []
