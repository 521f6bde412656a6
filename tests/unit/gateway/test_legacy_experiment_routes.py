"""An experiment an older event log routed under a stable model's name (or a capability's, before
routes were checked) does not take the stable deployment's traffic: the stable deployment wins."""

from __future__ import annotations

import msgspec
import pytest

from streams.events import serving as s
from tests.support.events import catalog_of, stable_deployment
from tests.unit.gateway.test_artifact_routing import CAPABILITY, ENVELOPE, REGISTERED

STABLE = msgspec.structs.replace(stable_deployment("emb", ENVELOPE), manifest_sha256="m" * 64)


def experiment(route: str) -> tuple[s.ExperimentCreated, s.ExperimentActivated]:
    created = s.ExperimentCreated(
        deployment_id=f"exp-{route}", capability=CAPABILITY, candidate_id="c2", artifact_set_id="x",
        model_name="trial", route=route, envelope=ENVELOPE, manifest_sha256="m" * 64,
    )  # fmt: skip
    return created, s.ExperimentActivated(deployment_id=created.deployment_id)


@pytest.mark.parametrize("name", [STABLE.model_name, CAPABILITY, "rag.embedding"])
def test_the_stable_deployment_wins_its_own_name_over_a_legacy_experiment(name: str) -> None:
    catalog = catalog_of(REGISTERED, STABLE, *experiment(name))
    assert catalog.deployments[f"exp-{name}"].active  # the older log did route it so
    resolved = catalog.resolve(CAPABILITY, name)
    assert resolved is not None
    assert resolved.deployment_id == "emb"


def test_an_experiment_is_still_reached_by_a_route_of_its_own() -> None:
    catalog = catalog_of(REGISTERED, STABLE, *experiment("trial"))
    resolved = catalog.resolve(CAPABILITY, "trial")
    assert resolved is not None
    assert resolved.deployment_id == "exp-trial"
