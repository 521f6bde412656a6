"""A load nobody reports on within the load timeout is ended on the books, so its deployment does
not stay LOADING for ever; one the agent reports on, or a restart reconciles, is no longer awaited."""

from __future__ import annotations

from gateway.state.loads import PendingLoad, fold_loads, loads_overdue, next_load_due
from streams.events import serving as s


def requested(load_id: str = "load-1", deployment_id: str = "emb") -> s.ResidencyLoadRequested:
    return s.ResidencyLoadRequested(
        load_id=load_id, accelerator_id="a1", node_id="n1", deployment_id=deployment_id, required_bytes=100
    )


def under_way(*events: object, at: float = 1_000.0) -> dict[str, PendingLoad]:
    pending: dict[str, PendingLoad] = {}
    for event in events:
        fold_loads(pending, event, at)  # type: ignore[arg-type]
    return pending


def test_a_load_nobody_reported_on_fails_once_its_timeout_has_passed() -> None:
    pending = under_way(requested())
    assert loads_overdue(pending, now=1_000.0 + 59.9, timeout_s=60) == []
    (failed,) = loads_overdue(pending, now=1_000.0 + 60, timeout_s=60)
    assert (failed.load_id, failed.deployment_id, failed.code) == ("load-1", "emb", "RESIDENCY_LOAD_FAILED")
    assert next_load_due(pending, 60) == 1_060.0


def test_a_load_the_agent_reported_on_is_no_longer_awaited() -> None:
    failed = s.ResidencyLoadFailed(
        load_id="load-1", accelerator_id="a1", deployment_id="emb", code="X", detail=""
    )
    assert under_way(requested(), failed) == {}
    assert next_load_due({}, 60) is None


def test_a_restart_that_does_not_hold_the_deployment_ends_its_load() -> None:
    reconciled = s.ResidencyReconciled(accelerator_id="a1", generation=2, held=("other",), dropped=("emb",))
    assert list(under_way(requested(), requested("load-2", "other"), reconciled)) == ["load-2"]
