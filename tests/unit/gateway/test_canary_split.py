"""A canary's weighted split: the choice per request is deterministic, splits a seeded stream of
requests within a binomial bound, keeps a client on one deployment when sticky, and falls back to
the stable deployment when the chosen experiment cannot take traffic."""

from __future__ import annotations

import math
import random
from itertools import pairwise

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.deployments.weights import RoutingKey, bucket_of, choose
from gateway.state.catalog import Catalog
from streams.events import serving as s
from tests.support.events import catalog_of, stable_deployment
from tests.unit.gateway.test_artifact_routing import CAPABILITY, ENVELOPE, REGISTERED

STABLE = msgspec.structs.replace(stable_deployment("emb", ENVELOPE), manifest_sha256="m" * 64)
CREATED = s.ExperimentCreated(
    deployment_id="exp", capability=CAPABILITY, candidate_id="c2", artifact_set_id="x",
    model_name="trial", route="trial", envelope=ENVELOPE, manifest_sha256="m" * 64,
)  # fmt: skip
ACTIVATED = s.ExperimentActivated(deployment_id="exp")


def split(experiment: int, sticky: bool = False) -> s.RoutingWeightsChanged:
    weights = {"emb": 100 - experiment, "exp": experiment}
    return s.RoutingWeightsChanged(deployment_id="emb", capability=CAPABILITY, weights=weights, sticky=sticky)


def canary(experiment: int, sticky: bool = False) -> Catalog:
    return catalog_of(REGISTERED, STABLE, CREATED, ACTIVATED, split(experiment, sticky))


def served_by(catalog: Catalog, client_id: str, request_id: str) -> str:
    chosen = catalog.resolve(CAPABILITY, "", RoutingKey(client_id, request_id))
    assert chosen is not None
    return chosen.deployment_id


def binomial_bound(n: int, p: float, sigmas: float = 5.0) -> float:
    return sigmas * math.sqrt(n * p * (1 - p))


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(min_value=0, max_value=2**32))
def test_a_seeded_stream_splits_90_10_within_a_binomial_bound(seed: int) -> None:
    catalog, stream = canary(10), random.Random(seed)
    n = 2000
    on_experiment = sum(
        served_by(catalog, "app", f"req-{stream.getrandbits(64):016x}") == "exp" for _ in range(n)
    )
    assert abs(on_experiment - 0.1 * n) <= binomial_bound(n, 0.1)


@given(client=st.text(max_size=40), requests=st.lists(st.text(max_size=40), min_size=2, max_size=20))
def test_a_sticky_split_serves_one_client_from_one_deployment(client: str, requests: list[str]) -> None:
    catalog = canary(50, sticky=True)
    assert len({served_by(catalog, client, request) for request in requests}) == 1


@given(key=st.text(max_size=40), low=st.integers(0, 100), high=st.integers(0, 100))
def test_ramping_a_canary_up_keeps_the_keys_it_had(key: str, low: int, high: int) -> None:
    low, high = min(low, high), max(low, high)
    bucket = bucket_of(CAPABILITY, key)
    if choose({"emb": 100 - low, "exp": low}, "emb", bucket) == "exp":
        assert choose({"emb": 100 - high, "exp": high}, "emb", bucket) == "exp"


@given(cuts=st.lists(st.integers(0, 100), max_size=4), bucket=st.integers(0, 99))
def test_the_choice_is_always_a_deployment_with_a_share(cuts: list[int], bucket: int) -> None:
    edges = [0, *sorted(cuts), 100]  # weights summing to 100: the gaps between cut points
    table = {f"d{i}": high - low for i, (low, high) in enumerate(pairwise(edges))}
    assert table[choose(table, "d0", bucket)] > 0


def test_the_same_request_is_routed_alike_on_every_fold_of_the_log() -> None:
    keys = [RoutingKey("app", f"r{i}") for i in range(200)]
    first, again = canary(30), canary(30)
    assert [served_by(first, k.client_id, k.request_id) for k in keys] == [
        served_by(again, k.client_id, k.request_id) for k in keys
    ]


def test_a_deactivated_experiment_sends_its_share_to_the_stable_deployment() -> None:
    catalog = catalog_of(
        REGISTERED, STABLE, CREATED, ACTIVATED, split(100), s.ExperimentDeactivated(deployment_id="exp")
    )
    assert served_by(catalog, "app", "r1") == "emb"


def test_a_capability_without_weights_is_served_by_its_stable_deployment() -> None:
    catalog = catalog_of(REGISTERED, STABLE, CREATED, ACTIVATED)
    assert {served_by(catalog, "app", f"r{i}") for i in range(50)} == {"emb"}


def test_naming_the_route_reaches_the_experiment_whatever_its_weight() -> None:
    chosen = canary(0).resolve(CAPABILITY, "trial", RoutingKey("app", "r1"))
    assert chosen is not None
    assert chosen.deployment_id == "exp"
