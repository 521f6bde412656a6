"""What a project-bound key is served by and what `GET /v1/models` lists for it: its project's
channel per bound capability, resolved by `Catalog.resolve` (an experiment route that leads to no
active experiment falls back to the stable deployment)."""

from __future__ import annotations

from gateway.clients.bindings import ProjectChannels
from gateway.http.models import models_of
from streams.events import Event
from streams.events import serving as s
from streams.events.control import ProjectBoundToChannel
from tests.support.events import catalog_of
from tests.unit.gateway.test_artifact_routing import CAPABILITY, PROMOTED, REGISTERED
from tests.unit.gateway.test_legacy_experiment_routes import experiment

RERANKING = "rag.reranking@1"
SCOPES = frozenset({CAPABILITY, RERANKING})
TRIAL = experiment("trial")
CATALOG = (REGISTERED, PROMOTED, *TRIAL)


def channels(channel: str) -> ProjectChannels:
    bound = ProjectChannels()
    bound.bind(ProjectBoundToChannel(project_id="pr-a", capability=CAPABILITY, channel=channel))
    return bound


def served_by(bound: ProjectChannels, *events: Event) -> str | None:
    catalog = catalog_of(*events)
    deployment = catalog.resolve(CAPABILITY, bound.route("pr-a", CAPABILITY, "m"))
    return deployment.deployment_id if deployment else None


def listed(bound: ProjectChannels | None, *events: Event) -> list[tuple[object, object]]:
    catalog = catalog_of(*events)
    models = models_of(catalog, SCOPES, bound.of("pr-a") if bound is not None else None)
    return [(m["id"], m["capability"]) for m in models]


def test_the_stable_channel_is_served_by_the_stable_deployment_even_when_the_client_names_a_route() -> None:
    bound = channels("stable")
    assert bound.route("pr-a", CAPABILITY, "trial") == ""
    assert served_by(bound, *CATALOG) == "emb"


def test_an_experiment_channel_is_served_by_its_active_experiment() -> None:
    assert served_by(channels("trial"), *CATALOG) == "exp-trial"


def test_an_experiment_channel_without_an_active_experiment_falls_back_to_the_stable_deployment() -> None:
    ended = s.ExperimentDeactivated(deployment_id="exp-trial", reason="done")
    assert served_by(channels("trial"), *CATALOG, ended) == "emb"


def test_models_lists_only_the_bound_capability_by_its_stable_model_name() -> None:
    assert listed(channels("stable"), *CATALOG) == [("m", CAPABILITY)]


def test_models_lists_an_experiment_channel_by_its_route_alone() -> None:
    assert listed(channels("trial"), *CATALOG) == [("trial", CAPABILITY)]


def test_models_lists_the_stable_model_for_an_experiment_channel_that_leads_nowhere() -> None:
    assert listed(channels("gone"), *CATALOG) == [("m", CAPABILITY)]


def test_models_lists_nothing_for_a_project_bound_to_no_capability() -> None:
    assert listed(ProjectChannels(), *CATALOG) == []


def test_models_for_a_key_without_a_project_lists_every_scope_and_route() -> None:
    assert listed(None, *CATALOG) == [("m", CAPABILITY), ("trial", CAPABILITY), (RERANKING, RERANKING)]
