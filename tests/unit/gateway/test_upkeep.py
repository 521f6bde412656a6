"""Upkeep decisions: always-warm loads, keep-warm TTL unloads, lease expiry."""

from __future__ import annotations

from gateway.scheduler import AcceleratorState, Lease, ResidencyState, Resident
from gateway.serving import upkeep
from gateway.state.catalog import Catalog, evolve_catalog
from streams.events import serving as s

ENVELOPE = s.ResourceEnvelope(required_bytes=100, peak_bytes=120, per_request_bytes=10, cold_load_ms=50)


def catalog_with(kind: str, ttl: float = 0.0) -> Catalog:
    promoted = s.DeploymentPromoted(
        deployment_id="d",
        capability="rag.embedding@1",
        candidate_id="c",
        approval_id="a",
        artifact_set_id="x",
        model_name="m",
        channel="stable",
        envelope=ENVELOPE,
        residency=s.ResidencyPolicy(kind=kind, keep_warm_ttl_s=ttl),  # type: ignore[arg-type]
    )
    return evolve_catalog(Catalog(), promoted)


def accelerator(*residents: Resident, leases: tuple[Lease, ...] = ()) -> AcceleratorState:
    return AcceleratorState(
        accelerator_id="a1", node_id="n1", total_bytes=1000, residents=residents, leases=leases
    )


def test_an_always_warm_deployment_resident_nowhere_is_missing() -> None:
    assert upkeep.warm_missing(catalog_with("always_warm"), [accelerator()]) == ["d"]


def test_an_always_warm_deployment_that_is_loading_is_not_missing() -> None:
    loading = Resident(deployment_id="d", measured_bytes=0, state=ResidencyState.LOADING)
    assert upkeep.warm_missing(catalog_with("always_warm"), [accelerator(loading)]) == []


def test_on_demand_deployments_are_never_loaded_by_upkeep() -> None:
    assert upkeep.warm_missing(catalog_with("on_demand"), [accelerator()]) == []


def test_a_keep_warm_resident_is_due_once_idle_for_its_ttl() -> None:
    idle = Resident(deployment_id="d", measured_bytes=50, last_used_at=100.0)
    catalog = catalog_with("keep_warm", ttl=30.0)
    assert upkeep.idle_past_ttl(catalog, [accelerator(idle)], now=129.0) == []
    assert upkeep.idle_past_ttl(catalog, [accelerator(idle)], now=130.0) == [
        upkeep.Unload("a1", "n1", "d", 100.0)
    ]
    assert upkeep.next_ttl_due(catalog, [accelerator(idle)]) == 130.0


def test_a_busy_keep_warm_resident_is_never_due() -> None:
    busy = Resident(deployment_id="d", measured_bytes=50, last_used_at=0.0, active_leases=1)
    catalog = catalog_with("keep_warm", ttl=1.0)
    assert upkeep.idle_past_ttl(catalog, [accelerator(busy)], now=1e9) == []
    assert upkeep.next_ttl_due(catalog, [accelerator(busy)]) is None


def test_only_leases_still_on_the_books_past_their_expiry_expire() -> None:
    state = accelerator(leases=(Lease(lease_id="L1", deployment_id="d", reserved_bytes=5),))
    expiries = {"L1": ("a1", 10.0), "L2": ("a1", 5.0)}  # L2 was already released
    assert upkeep.expired({"a1": state}, expiries, now=9.0) == []
    assert upkeep.expired({"a1": state}, expiries, now=10.0) == [upkeep.Expire("a1", "L1")]
