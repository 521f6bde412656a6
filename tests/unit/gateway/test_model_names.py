"""The names a call may give in `model`: its stable deployment's model and the experiments'
routes, never a drained deployment's."""

from __future__ import annotations

from streams.events import serving as s
from tests.support.events import catalog_of
from tests.unit.gateway.test_artifact_routing import CAPABILITY, REGISTERED
from tests.unit.gateway.test_legacy_experiment_routes import STABLE, experiment


def test_a_capability_is_called_by_its_stable_model_and_its_experiments_routes() -> None:
    catalog = catalog_of(REGISTERED, STABLE, *experiment("trial"))
    assert sorted(catalog.model_names(CAPABILITY)) == [STABLE.model_name, "trial"]


def test_another_capabilitys_models_are_not_names_of_this_one() -> None:
    catalog = catalog_of(REGISTERED, STABLE)
    assert catalog.model_names("rag.reranking@1") == []


def test_a_drained_deployments_model_is_no_longer_a_name_to_call() -> None:
    drained = (s.DeploymentDraining(deployment_id="emb"), s.DeploymentDrained(deployment_id="emb"))
    catalog = catalog_of(REGISTERED, STABLE, *drained, *experiment("trial"))
    assert catalog.model_names(CAPABILITY) == ["trial"]
