"""A deployment's replicas, placement and caps: checked, recorded as one event, folded."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.deployments.commands import ChangeCaps, ChangeScaling
from gateway.deployments.decide import MAX_CAP, decide_deployment
from gateway.deployments.evolve import evolve_deployment
from gateway.deployments.model import DeploymentState
from gateway.promotion.profile import check_profile, check_scaling, scaling
from streams.codes import ServingError
from streams.events import serving as s
from tests.support.events import experiment_created, stable_deployment

NOW = None
ENVELOPE = s.ResourceEnvelope(required_bytes=1, peak_bytes=1, per_request_bytes=1, cold_load_ms=1.0)
PROMOTED = evolve_deployment(None, stable_deployment("dep-1", ENVELOPE), 1)
assert PROMOTED is not None
DEPLOYMENT: DeploymentState = PROMOTED


def test_a_deployment_has_one_packed_copy_unless_its_config_says_otherwise() -> None:
    assert scaling({}) == (s.Replicas(min=1, max=1), "binpack")
    assert scaling({"replicas_min": "2", "placement": "spread"}) == (s.Replicas(min=2, max=2), "spread")
    assert scaling({"replicas_min": "1", "replicas_max": "3"}) == (s.Replicas(min=1, max=3), "binpack")


@pytest.mark.parametrize(
    ("low", "high", "placement", "field"),
    [(0, 1, "binpack", "replicas.min"), (3, 2, "binpack", "replicas.max"), (1, 65, "binpack", "replicas.max"),
     (1, 1, "scatter", "placement")],
)  # fmt: skip
def test_replicas_outside_one_to_max_or_an_unknown_placement_are_refused_by_name(
    low: int, high: int, placement: str, field: str
) -> None:
    with pytest.raises(ServingError) as refused:
        check_scaling(low, high, placement)
    assert (refused.value.code, refused.value.param) == ("INVALID_INPUT", field)


def test_a_candidate_config_with_bad_replicas_is_refused_at_creation() -> None:
    with pytest.raises(ServingError) as refused:
        check_profile("rag.rerank@1", {}, {"replicas_min": "2", "replicas_max": "1"})
    assert refused.value.code == "INVALID_INPUT"


def test_changing_the_replicas_is_one_event_that_the_deployment_folds() -> None:
    change = ChangeScaling("dep-1", s.Replicas(min=2, max=4), "spread")
    (changed,) = decide_deployment(DEPLOYMENT, change, NOW)
    assert isinstance(changed, s.DeploymentScalingChanged)
    folded = evolve_deployment(DEPLOYMENT, changed, 2)
    assert folded is not None
    assert (folded.replicas, folded.placement, folded.resident_floor) == (
        s.Replicas(min=2, max=4),
        "spread",
        2,
    )
    assert decide_deployment(folded, change, NOW) == []  # the same again changes nothing


def test_one_copy_on_demand_is_kept_resident_by_nobody() -> None:
    assert DEPLOYMENT.resident_floor == 0


def test_an_experiment_runs_one_request_at_a_time_and_a_stable_deployment_has_no_cap_of_its_own() -> None:
    experiment = evolve_deployment(None, experiment_created("exp-1", ENVELOPE), 1)
    assert experiment is not None
    assert experiment.caps == s.DeploymentCaps(max_concurrency=1, max_queue_depth=64)
    assert DEPLOYMENT.caps == s.DeploymentCaps(max_concurrency=0, max_queue_depth=64)


def test_changing_the_caps_is_one_event_that_the_deployment_folds_and_an_omitted_one_stays() -> None:
    change = ChangeCaps("dep-1", max_concurrency=2)
    (changed,) = decide_deployment(DEPLOYMENT, change, NOW)
    assert isinstance(changed, s.DeploymentCapsChanged)
    folded = evolve_deployment(DEPLOYMENT, changed, 2)
    assert folded is not None
    assert folded.caps == s.DeploymentCaps(max_concurrency=2, max_queue_depth=64)
    assert decide_deployment(folded, change, NOW) == []  # the same again changes nothing


@given(
    concurrency=st.one_of(st.none(), st.integers(-5, MAX_CAP + 5)),
    queue_depth=st.one_of(st.none(), st.integers(-5, MAX_CAP + 5)),
)
def test_caps_from_zero_to_the_maximum_are_taken_and_others_refused_naming_the_field(
    concurrency: int | None, queue_depth: int | None
) -> None:
    def valid(value: int | None) -> bool:
        return value is None or 0 <= value <= MAX_CAP

    change = ChangeCaps("dep-1", concurrency, queue_depth)
    if valid(concurrency) and valid(queue_depth):
        events = decide_deployment(DEPLOYMENT, change, NOW)
        folded = DEPLOYMENT
        for event in events:
            folded = evolve_deployment(folded, event, 2) or folded
        assert folded.caps.max_concurrency == (0 if concurrency is None else concurrency)
        assert folded.caps.max_queue_depth == (64 if queue_depth is None else queue_depth)
        return
    with pytest.raises(ServingError) as refused:
        decide_deployment(DEPLOYMENT, change, NOW)
    field = "max_concurrency" if not valid(concurrency) else "max_queue_depth"
    assert (refused.value.code, refused.value.param) == ("INVALID_INPUT", field)
