"""Canary commands, decided: a split is whole percents summing to 100 over the stable deployment and
active, production-approved experiments of its capability in its embedding space (stable codes,
nothing recorded otherwise); taking back a share that is already 0 decides nothing, which is what makes a guard's
rollback happen once across replicas."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
import pytest

from gateway.deployments.commands import ChangeRoutingWeights, SetRollbackPolicy, TakeBackShare
from gateway.deployments.decide import decide_deployment
from gateway.deployments.guard import check_policy
from gateway.deployments.model import DeploymentState
from gateway.deployments.weights import check_weights
from streams.codes import ServingError
from streams.events import releases as r
from streams.events import serving as s
from tests.unit.gateway.test_canary_split import canary

NOW = datetime(2026, 12, 4, tzinfo=UTC)
CATALOG = canary(10)
STABLE, EXPERIMENT = CATALOG.deployments["emb"], CATALOG.deployments["exp"]
APPROVED = {EXPERIMENT.candidate_id}  # candidates holding a usable production approval
POLICY = r.RollbackPolicy(guards=(r.RollbackGuard(kind="invalid_output_count", threshold=3),))


def refused(stable: DeploymentState, weights: dict[str, object], *others: DeploymentState) -> ServingError:
    with pytest.raises(ServingError) as raised:
        check_weights(stable, weights, [stable, *(others or (EXPERIMENT,))], APPROVED)
    return raised.value


@pytest.mark.parametrize(
    "weights",
    [{"emb": 90, "exp": 20}, {"emb": 80, "exp": 10}, {"emb": 90, "exp": 10.0},
     {"emb": 90, "exp": True}, {"emb": 110, "exp": -10}, {}],
)  # fmt: skip
def test_weights_that_are_not_whole_percents_summing_to_100_are_refused(weights: dict[str, object]) -> None:
    error = refused(STABLE, weights)
    assert (error.code, error.param) == ("ROUTING_WEIGHTS_INVALID", "weights")


def test_a_weight_on_an_unknown_deployment_is_refused() -> None:
    assert refused(STABLE, {"emb": 90, "nope": 10}).code == "ROUTING_TARGET_INVALID"


def test_a_weight_on_an_experiment_of_another_capability_is_refused() -> None:
    elsewhere = msgspec.structs.replace(EXPERIMENT, capability="rag.reranking@1")
    assert refused(STABLE, {"emb": 90, "exp": 10}, elsewhere).code == "ROUTING_TARGET_INVALID"


def test_a_share_for_an_inactive_experiment_is_refused_but_a_zero_weight_is_not() -> None:
    inactive = msgspec.structs.replace(EXPERIMENT, active=False)
    assert refused(STABLE, {"emb": 90, "exp": 10}, inactive).code == "ROUTING_TARGET_INVALID"
    assert check_weights(STABLE, {"emb": 100, "exp": 0}, [STABLE, inactive], APPROVED) == {
        "emb": 100,
        "exp": 0,
    }


def test_a_share_for_an_experiment_without_a_production_approval_is_refused() -> None:
    with pytest.raises(ServingError) as raised:
        check_weights(STABLE, {"emb": 90, "exp": 10}, [STABLE, EXPERIMENT], approved=set())
    assert raised.value.code == "ROUTING_TARGET_INVALID"
    assert "production approval" in raised.value.message
    assert check_weights(STABLE, {"emb": 100, "exp": 0}, [STABLE, EXPERIMENT], approved=set())


def test_a_share_for_an_experiment_in_another_embedding_space_is_refused() -> None:
    space = s.EmbeddingSpace(space_id="other", dimension=768, normalized=True, input_semantics="symmetric")
    other = msgspec.structs.replace(EXPERIMENT, embedding_space=space)
    assert refused(STABLE, {"emb": 90, "exp": 10}, other).code == "ROUTING_TARGET_INVALID"


def test_taking_back_a_share_gives_it_to_the_stable_deployment_and_says_why() -> None:
    trip = r.GuardTrip(
        experiment_id="exp",
        guard=POLICY.guards[0],
        observed=4,
        baseline=0,
        experiment_requests=4,
        stable_requests=9,
    )
    (event,) = decide_deployment(STABLE, TakeBackShare("emb", "exp", "guard tripped", trip), NOW)
    assert isinstance(event, r.RoutingWeightsChanged)
    assert event.weights == {"emb": 100, "exp": 0}
    assert (event.reason, event.guard) == ("guard tripped", trip)


def test_taking_back_a_share_already_taken_decides_nothing() -> None:
    taken = msgspec.structs.replace(STABLE, weights={"emb": 100, "exp": 0})
    assert decide_deployment(taken, TakeBackShare("emb", "exp", "again"), NOW) == []


def test_the_same_split_again_decides_nothing() -> None:
    assert decide_deployment(STABLE, ChangeRoutingWeights("emb", dict(STABLE.weights)), NOW) == []


def test_a_split_is_recorded_on_a_stable_deployment_only() -> None:
    with pytest.raises(ServingError) as raised:
        decide_deployment(EXPERIMENT, ChangeRoutingWeights("exp", {"exp": 100}), NOW)
    assert raised.value.code == "ROUTING_TARGET_INVALID"


def test_a_rollback_policy_guards_an_experiment_only() -> None:
    with pytest.raises(ServingError) as raised:
        decide_deployment(STABLE, SetRollbackPolicy("emb", POLICY), NOW)
    assert raised.value.code == "ROLLBACK_POLICY_INVALID"
    (event,) = decide_deployment(EXPERIMENT, SetRollbackPolicy("exp", POLICY), NOW)
    assert event == r.RollbackPolicyChanged(deployment_id="exp", policy=POLICY)


@pytest.mark.parametrize(
    "guard",
    [r.RollbackGuard(kind="error_rate", threshold=1.5), r.RollbackGuard(kind="p95_latency_ms", threshold=-1),
     r.RollbackGuard(kind="invalid_output_count", threshold=3, window_s=0),
     r.RollbackGuard(kind="error_rate", threshold=0.1, min_requests=0),
     r.RollbackGuard(kind="p95_latency_ms", threshold=float("nan"))],
)  # fmt: skip
def test_a_guard_without_a_sensible_threshold_or_window_is_refused(guard: r.RollbackGuard) -> None:
    with pytest.raises(ServingError) as raised:
        check_policy(r.RollbackPolicy(guards=(guard,)))
    assert (raised.value.code, raised.value.param) == ("ROLLBACK_POLICY_INVALID", "guards")
