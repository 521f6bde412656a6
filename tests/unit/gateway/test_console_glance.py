"""The console's glance reads as pure functions: traffic buckets per capability, and each
deployment's copies and health in words."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.admin.glance import Finished, fleet, traffic
from gateway.admin.reads import percentile
from gateway.scheduler import AcceleratorState, ResidencyState, Resident
from gateway.state.catalog import Catalog, evolve_catalog
from streams.events import serving as s
from tests.support.events import stable_deployment

ENVELOPE = s.ResourceEnvelope(required_bytes=100, peak_bytes=120, per_request_bytes=10, cold_load_ms=50)
UNTIL = 1_000_000.0


def test_every_capability_gets_every_bucket_ending_with_the_one_holding_now() -> None:
    seen = traffic(
        [Finished("a", "completed", 5.0, UNTIL - 1), Finished("b", "failed", 9.0, UNTIL - 130)],
        UNTIL,
        window_s=300,
        step_s=60,
    )
    assert [c.capability for c in seen.capabilities] == ["a", "b"]
    for series in seen.capabilities:
        assert [p.at for p in series.points] == [seen.since + i * 60 for i in range(5)]
        assert series.points[-1].at <= UNTIL < series.points[-1].at + 60
    b = seen.capabilities[1]
    assert (b.requests, sum(p.errors for p in b.points)) == (1, 1)
    assert all(p.p50_ms is None for p in b.points)  # a failure has no latency to rank


def test_requests_before_the_window_are_left_out() -> None:
    seen = traffic([Finished("a", "completed", 5.0, UNTIL - 3600)], UNTIL, window_s=300, step_s=60)
    assert seen.capabilities == []


finished = st.builds(
    Finished,
    st.sampled_from(["rag.embedding@1", "rag.reranking@1"]),
    st.sampled_from(["completed", "failed", "rejected"]),
    st.floats(min_value=0, max_value=1e5),
    st.floats(min_value=UNTIL - 599, max_value=UNTIL),
)


@settings(max_examples=100, deadline=None)
@given(st.lists(finished, max_size=60), st.sampled_from([1, 7, 60, 600]))
def test_the_buckets_count_each_request_in_the_window_once(items: list[Finished], step_s: int) -> None:
    seen = traffic(items, UNTIL, window_s=600, step_s=step_s)
    inside = [x for x in items if x.at >= seen.since]
    assert sum(c.requests for c in seen.capabilities) == len(inside)
    for series in seen.capabilities:
        assert sum(p.requests for p in series.points) == series.requests
        for point in series.points:
            latencies = [
                x.total_ms
                for x in inside
                if x.capability == series.capability
                and x.status == "completed"
                and point.at <= x.at < point.at + step_s
                and x.total_ms is not None
            ]
            assert (point.p50_ms, point.p95_ms) == (percentile(latencies, 0.5), percentile(latencies, 0.95))


def accelerator(index: int, *residents: Resident) -> AcceleratorState:
    return AcceleratorState(
        accelerator_id=f"a{index}", node_id=f"n{index}", total_bytes=1000, residents=residents
    )


def copy(state: ResidencyState = ResidencyState.LOADED) -> Resident:
    return Resident(deployment_id="d", measured_bytes=100, state=state)


def scaled(low: int) -> Catalog:
    change = s.DeploymentScalingChanged(
        deployment_id="d", replicas=s.Replicas(min=low, max=low), placement="spread"
    )
    return evolve_catalog(evolve_catalog(Catalog(), stable_deployment("d", ENVELOPE)), change)


def test_a_deployment_short_of_the_copies_it_keeps_is_degraded_and_says_how_many() -> None:
    [row] = fleet(
        scaled(2).deployments.values(), [accelerator(1, copy()), accelerator(2, copy(ResidencyState.LOADING))]
    )
    assert (row.health, row.health_reason) == ("degraded", "1 of 2 copies loaded, 1 loading")
    assert [(c.accelerator_id, c.state) for c in row.copies] == [("a1", "loaded"), ("a2", "loading")]


def test_an_on_demand_deployment_without_a_copy_is_idle_not_degraded() -> None:
    [row] = fleet(scaled(1).deployments.values(), [accelerator(1)])
    assert (row.health, row.copies) == ("idle", [])


def test_a_deployment_with_its_copies_loaded_is_ok() -> None:
    [row] = fleet(scaled(2).deployments.values(), [accelerator(1, copy()), accelerator(2, copy())])
    assert (row.health, row.health_reason, row.replicas_min) == ("ok", "2 copies loaded", 2)
