"""What was approved is what serves: a registered artifact set never takes other files, and a
deployment loads only the manifest it was promoted with, from a set that is not quarantined."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.promotion.conftest import Stack, lab_ready_candidate, refused

pytestmark = pytest.mark.timeout(300)


def files_in(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


async def test_a_registered_set_never_takes_other_files(stack: Stack, model_copy: Path) -> None:
    candidate = await lab_ready_candidate(stack, model_copy, "fixed-files")
    approval = await stack.post("/approvals/production", {"candidate_id": candidate["candidate_id"]})
    assert isinstance(approval, dict)
    imported = stack.artifact_root / "fixed-files"
    before = files_in(imported)
    (model_copy / "EXTRA_UNREVIEWED.txt").write_text("not what was approved\n")
    body = {"source": str(model_copy), "name": "fixed-files", "node_id": stack.node,
            "artifact_root": str(stack.artifact_root)}  # fmt: skip
    error = await refused(stack, "/artifact-sets/import", body, "STATE_CONFLICT")
    assert error["error"]["details"]["artifact_set_id"] == "as-fixed-files"
    assert files_in(imported) == before, "a refused import must not touch the set's folder"
    still = await stack.get(f"/approvals/{approval['approval_id']}")
    assert isinstance(still, dict)
    assert still["status"] == "approved"


async def test_importing_the_same_files_again_changes_nothing(stack: Stack, model_copy: Path) -> None:
    await lab_ready_candidate(stack, model_copy, "same-files")
    head = await stack.events_head()
    body = {"source": str(model_copy), "name": "same-files", "node_id": stack.node,
            "artifact_root": str(stack.artifact_root), "verify": False}  # fmt: skip
    again = await stack.post("/artifact-sets/import", body)
    assert isinstance(again, dict)
    assert again["status"] == "verified"
    assert await stack.events_head() == head
