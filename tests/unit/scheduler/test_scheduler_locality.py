"""Artifact locality: a cold load counts fetching its artifact set on a node that lacks it, so a
node holding the set loads it sooner and is chosen where the load fits both."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from sched_builders import NOW, POLICY, ask, gib, gpu, model

from gateway.scheduler import Verdict, plan_placement
from gateway.scheduler.placement import cold_load_estimate_ms

SET = "as-minilm"


def test_a_node_without_the_set_adds_its_fetch_at_the_policys_rate() -> None:
    envelope = model(
        cold_load_ms=2000.0, artifact_set_id=SET, artifact_bytes=int(POLICY.artifact_fetch_bytes_per_s)
    )
    assert cold_load_estimate_ms(envelope, gpu("gpu-0"), POLICY) == 3000.0
    assert cold_load_estimate_ms(envelope, gpu("gpu-0", cached_sets=(SET,)), POLICY) == 2000.0


def test_a_cold_load_goes_to_the_node_that_holds_the_set_over_a_tighter_fit() -> None:
    fleet = (gpu("gpu-a", total_gib=24), gpu("gpu-b", cached_sets=(SET,)))
    decision = plan_placement(fleet, model(artifact_set_id=SET, artifact_bytes=gib(1)), ask(), POLICY, NOW)
    assert decision.verdict is Verdict.ADMIT
    assert decision.accelerator_id == "gpu-b"


@given(
    holder=st.integers(min_value=0, max_value=3),
    totals=st.lists(st.sampled_from([24, 40, 80]), min_size=4, max_size=4),
    set_bytes=st.integers(min_value=1, max_value=gib(20)),
)
def test_where_a_cold_load_fits_as_is_everywhere_the_node_holding_the_set_gets_it(
    holder: int, totals: list[int], set_bytes: int
) -> None:
    fleet = tuple(
        gpu(f"gpu-{i}", total_gib=total, cached_sets=(SET,) if i == holder else ())
        for i, total in enumerate(totals)
    )
    envelope = model(artifact_set_id=SET, artifact_bytes=set_bytes)
    assert plan_placement(fleet, envelope, ask(), POLICY, NOW).accelerator_id == f"gpu-{holder}"


@given(totals=st.lists(st.sampled_from([24, 40, 80]), min_size=1, max_size=4))
def test_without_an_artifact_set_placement_is_as_before(totals: list[int]) -> None:
    fleet = tuple(gpu(f"gpu-{i}", total_gib=total) for i, total in enumerate(totals))
    with_set = plan_placement(fleet, model(artifact_set_id=SET, artifact_bytes=gib(1)), ask(), POLICY, NOW)
    without = plan_placement(fleet, model(), ask(), POLICY, NOW)
    assert with_set.accelerator_id == without.accelerator_id
