"""A deployment serves only the files it was promoted with: routing passes it by while its artifact
set is quarantined or holds another manifest (CAPABILITY_UNAVAILABLE), and says why."""

from __future__ import annotations

import msgspec

from streams.events import control as c
from streams.events import serving as s
from tests.support.events import catalog_of, stable_deployment
from tests.unit.promotion.builders import files

replace = msgspec.structs.replace
CAPABILITY = "rag.embedding@1"
REGISTERED = c.ArtifactSetRegistered(
    artifact_set_id="x", name="m", capability=CAPABILITY, node_id="node-1", root="m", files=files(),
    manifest_sha256="m" * 64,
)  # fmt: skip
OTHER_FILES = replace(
    REGISTERED,
    files=files(c.ArtifactFile(path="EXTRA.txt", sha256="c" * 64, size=5, format="other")),
    manifest_sha256="n" * 64,
)
ENVELOPE = s.ResourceEnvelope(required_bytes=100, peak_bytes=120, per_request_bytes=5, cold_load_ms=10.0)
PROMOTED = replace(stable_deployment("emb", ENVELOPE), manifest_sha256="m" * 64)
QUARANTINED = c.ArtifactSetQuarantined(artifact_set_id="x", reason="recalled")


def test_a_deployment_on_its_promoted_manifest_is_routed() -> None:
    catalog = catalog_of(REGISTERED, PROMOTED)
    assert catalog.resolve(CAPABILITY) == catalog.deployments["emb"]
    assert catalog.unservable(catalog.deployments["emb"]) is None


def test_a_quarantined_set_is_not_routed_and_says_so() -> None:
    catalog = catalog_of(REGISTERED, PROMOTED, QUARANTINED)
    assert catalog.resolve(CAPABILITY) is None
    assert "quarantined" in catalog.unavailable(CAPABILITY)


def test_registering_the_set_again_does_not_lift_its_quarantine() -> None:
    catalog = catalog_of(REGISTERED, PROMOTED, QUARANTINED, REGISTERED)
    assert catalog.artifact_sets["x"].quarantined
    assert catalog.resolve(CAPABILITY) is None


def test_a_set_that_holds_other_files_than_were_promoted_is_not_routed() -> None:
    catalog = catalog_of(REGISTERED, PROMOTED, OTHER_FILES)
    assert catalog.resolve(CAPABILITY) is None
    assert "other files" in catalog.unavailable(CAPABILITY)


def test_a_promotion_logged_without_its_manifest_binds_the_sets_manifest_at_that_point() -> None:
    legacy = stable_deployment("emb", ENVELOPE)
    assert legacy.manifest_sha256 == ""  # an event from before deployments kept it
    catalog = catalog_of(REGISTERED, legacy)
    assert catalog.deployments["emb"].manifest_sha256 == "m" * 64
    assert catalog.resolve(CAPABILITY) is not None
    assert catalog_of(REGISTERED, legacy, OTHER_FILES).resolve(CAPABILITY) is None


def test_an_experiment_on_a_quarantined_set_is_not_routed() -> None:
    experiment = s.ExperimentCreated(
        deployment_id="exp", capability=CAPABILITY, candidate_id="c", artifact_set_id="x", model_name="trial",
        route="trial", envelope=ENVELOPE, manifest_sha256="m" * 64,
    )  # fmt: skip
    activated = s.ExperimentActivated(deployment_id="exp")
    assert catalog_of(REGISTERED, experiment, activated).resolve(CAPABILITY, "trial") is not None
    assert catalog_of(REGISTERED, experiment, activated, QUARANTINED).resolve(CAPABILITY, "trial") is None
