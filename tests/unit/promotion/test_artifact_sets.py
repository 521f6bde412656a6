"""Artifact set decisions: a registered set never changes its files."""

from __future__ import annotations

import pytest

from gateway.promotion.commands import RegisterArtifactSet
from gateway.promotion.decide import decide_artifact_set
from streams.codes import ServingError
from streams.events import control as c
from tests.unit.promotion.builders import NOW, artifacts, files, replace


def registration(**changes: object) -> c.ArtifactSetRegistered:
    base = c.ArtifactSetRegistered(
        artifact_set_id="as-minilm", name="minilm", capability="rag.embedding@1", node_id="node-1",
        root="minilm", files=files(), manifest_sha256="m" * 64, source="import:/models/minilm",
    )  # fmt: skip
    return replace(base, **changes)


def test_registering_a_set_with_other_files_is_refused() -> None:
    extra = c.ArtifactFile(path="EXTRA.txt", sha256="c" * 64, size=5, format="other")
    for changed in (
        registration(files=files(extra), manifest_sha256="n" * 64),
        registration(files=(files()[0],), manifest_sha256="n" * 64),
    ):
        with pytest.raises(ServingError) as refused:
            decide_artifact_set(artifacts(), RegisterArtifactSet(changed), NOW)
        assert refused.value.code == "STATE_CONFLICT"
        assert refused.value.details["offered_manifest_sha256"] == "n" * 64


def test_registering_the_same_files_again_changes_nothing() -> None:
    assert decide_artifact_set(artifacts(), RegisterArtifactSet(registration()), NOW) == []


def test_the_same_files_in_another_place_are_registered_there() -> None:
    moved = registration(root="minilm-2")
    assert decide_artifact_set(artifacts(), RegisterArtifactSet(moved), NOW) == [moved]


def test_a_new_set_is_registered() -> None:
    new = registration()
    assert decide_artifact_set(None, RegisterArtifactSet(new), NOW) == [new]
