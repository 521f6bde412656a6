"""Experiment routes and stable model names share the names a client puts in `model`: a route is
a plain name that no capability and no stable deployment answers to, and a stable deployment is
not promoted under an experiment's route."""

from __future__ import annotations

import msgspec
import pytest

from gateway.deployments.evolve import evolve_deployment
from gateway.deployments.model import DeploymentState
from gateway.deployments.routes import capability_names, check_model_name, check_route
from gateway.promotion.deploy import ExperimentFacts, plan_experiment, plan_promotion
from streams.codes import ServingError
from streams.events import serving as s
from tests.unit.promotion.builders import NOW, artifacts, candidate, lab_approval, node
from tests.unit.promotion.test_decide import promotion


def stable(model_name: str = "minilm", **changes: object) -> DeploymentState:
    state = evolve_deployment(None, plan_promotion(promotion()).events[0], 5)
    assert state is not None
    return msgspec.structs.replace(state, model_name=model_name, **changes)


def experiment(route: str, **changes: object) -> DeploymentState:
    (created,) = plan_experiment(facts(route), NOW)
    state = evolve_deployment(None, created, 7)
    assert state is not None
    return msgspec.structs.replace(state, **changes)


def facts(route: str, deployments: tuple[DeploymentState, ...] = ()) -> ExperimentFacts:
    return ExperimentFacts(
        route=route, candidate=candidate(), lab_approval=lab_approval(), artifacts=artifacts(), node=node(),
        node_online=True, existing=None, deployments=deployments,
    )  # fmt: skip


def refusal(route: str, deployments: tuple[DeploymentState, ...] = ()) -> str:
    with pytest.raises(ServingError) as refused:
        check_route(route, deployments)
    return refused.value.code


@pytest.mark.parametrize("route", ["", " ", "a b", "lab/1", "*", "rag.embedding@1", "-lead", "x" * 129])
def test_a_route_is_a_plain_name(route: str) -> None:
    assert refusal(route) == "INVALID_INPUT"


@pytest.mark.parametrize("route", sorted(name for name in capability_names() if "@" not in name))
def test_a_route_never_names_a_capability(route: str) -> None:
    assert refusal(route) == "EXPERIMENT_NOT_ROUTABLE"


def test_a_route_never_names_a_stable_model() -> None:
    assert refusal("minilm", (stable("minilm"),)) == "EXPERIMENT_NOT_ROUTABLE"
    check_route("minilm", (stable("minilm", draining=True, drained=True, active=False),))
    check_route("minilm-lab", (stable("minilm"),))


def test_an_experiment_is_not_created_under_a_stable_model_name() -> None:
    with pytest.raises(ServingError) as refused:
        plan_experiment(facts("minilm", (stable("minilm"),)), NOW)
    assert refused.value.code == "EXPERIMENT_NOT_ROUTABLE"
    (created,) = plan_experiment(facts("minilm-lab", (stable("minilm"),)), NOW)
    assert isinstance(created, s.ExperimentCreated)


def test_a_stable_model_is_not_promoted_under_an_experiment_route() -> None:
    routed = experiment("minilm", active=False)  # inactive: it may be activated again
    with pytest.raises(ServingError) as refused:
        plan_promotion(promotion((routed,)))
    assert refused.value.code == "STATE_CONFLICT"
    check_model_name("minilm", (experiment("minilm", draining=True, drained=True, active=False),))
    assert plan_promotion(promotion((experiment("minilm-lab"),))).events
