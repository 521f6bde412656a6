"""What was approved is what serves: a registered artifact set never takes other files, and a
deployment loads only the manifest it was promoted with, from a set that is not quarantined."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest

from artifacts import build_manifest
from artifacts.registration import registration
from eventstore.store import EventStore, ExpectedVersion
from streams.events import control as c
from streams.events import serving as s
from streams.subjects import Aggregate
from tests.integration.promotion.conftest import Stack, lab_ready_candidate, production_approval, refused
from tests.support.agents import next_event

pytestmark = pytest.mark.timeout(300)


def files_in(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


async def test_a_registered_set_never_takes_other_files(stack: Stack, model_copy: Path) -> None:
    candidate = await lab_ready_candidate(stack, model_copy, "fixed-files")
    approval = await stack.post("/approvals/production", production_approval(candidate["candidate_id"]))
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


@pytest.fixture(scope="module")
async def key(stack: Stack) -> str:
    client = await stack.post("/clients", {"name": "identity-app", "scopes": ["rag.embedding@1"]})
    assert isinstance(client, dict)
    return str(client["key"])


async def serving(stack: Stack, source: Path, name: str) -> dict[str, Any]:
    """`name` promoted as the one stable embedding deployment (an earlier one drained)."""
    deployments = await stack.get("/deployments")
    assert isinstance(deployments, list)
    for earlier in deployments:
        if earlier["channel"] == "stable" and not earlier["drained"]:
            await stack.post(f"/deployments/{earlier['deployment_id']}/drain", {"reason": "next test"})
    candidate = await lab_ready_candidate(stack, source, name)
    approval = await stack.post("/approvals/production", production_approval(candidate["candidate_id"]))
    assert isinstance(approval, dict)
    deployment = await stack.post(
        "/deployments", {"candidate_id": candidate["candidate_id"], "approval_id": approval["approval_id"]}
    )
    assert isinstance(deployment, dict)
    return deployment


async def embed(stack: Stack, key: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=stack.gateway.url, timeout=120) as http:
        return await http.post(
            "/v1/embeddings", json={"input": ["hello world"]}, headers={"authorization": f"Bearer {key}"}
        )


async def test_a_quarantined_set_stops_serving_and_is_not_loaded_again(
    stack: Stack, model_copy: Path, key: str
) -> None:
    deployment = await serving(stack, model_copy, "recalled")
    assert (await embed(stack, key)).status_code == 200
    await stack.post(f"/artifact-sets/{deployment['artifact_set_id']}/quarantine", {"reason": "recalled"})
    for _ in ("resident", "unloaded"):
        refused_request = await embed(stack, key)
        assert refused_request.status_code == 503, refused_request.text[:300]
        error = refused_request.json()["error"]
        assert error["code"] == "CAPABILITY_UNAVAILABLE"
        assert "quarantined" in error["message"]
        await stack.post(f"/deployments/{deployment['deployment_id']}/unload")


async def test_a_quarantined_sets_idle_resident_is_unloaded_without_an_operator(
    stack: Stack, model_copy: Path, key: str
) -> None:
    deployment = await serving(stack, model_copy, "recalled-resident")
    assert (await embed(stack, key)).status_code == 200  # resident now (on demand: it stays)
    await stack.post(f"/artifact-sets/{deployment['artifact_set_id']}/quarantine", {"reason": "recalled"})
    accelerator, deployment_id = f"{stack.node}-cpu0", deployment["deployment_id"]
    unloading = await next_event(
        stack.connection,
        Aggregate.ACCELERATOR,
        accelerator,
        lambda e: isinstance(e, s.ResidencyUnloading) and e.deployment_id == deployment_id,
    )
    assert unloading.reason == "artifact_set_unservable"  # the gateway's upkeep asked, not an operator
    unloaded = await next_event(
        stack.connection,
        Aggregate.ACCELERATOR,
        accelerator,
        lambda e: isinstance(e, s.ResidencyUnloaded) and e.deployment_id == deployment_id,
    )
    assert unloaded.accelerator_id == accelerator


async def test_a_set_logged_with_other_files_is_not_loaded(stack: Stack, model_copy: Path, key: str) -> None:
    """A log written before sets were immutable may re-register a promoted set with other files:
    the deployment loads only the manifest it was promoted with, so it serves no longer."""
    deployment = await serving(stack, model_copy, "swapped")
    await stack.post(f"/deployments/{deployment['deployment_id']}/unload")
    folder = stack.artifact_root / "swapped"
    shutil.copyfile(model_copy / "tokenizer.json", folder / "EXTRA_UNREVIEWED.json")
    event = registration(
        build_manifest(folder), set_id=deployment["artifact_set_id"], name="swapped",
        capability="rag.embedding@1", node_id=stack.node, folder="swapped", source="an older gateway",
    )  # fmt: skip
    sequence = await EventStore(stack.connection).append(
        Aggregate.ARTIFACT_SET, event.artifact_set_id, [event], ExpectedVersion.ANY
    )
    assert stack.gateway.replica is not None
    assert await stack.gateway.replica.edge.ctx.live.wait_applied(sequence)
    refused_request = await embed(stack, key)
    assert refused_request.status_code == 503, refused_request.text[:300]
    error = refused_request.json()["error"]
    assert error["code"] == "CAPABILITY_UNAVAILABLE"
    assert "other files" in error["message"]


async def test_the_approval_binds_the_manifest_the_probe_loaded(stack: Stack, model_copy: Path) -> None:
    candidate = await lab_ready_candidate(stack, model_copy, "probed-files")
    artifact_set = await stack.get(f"/artifact-sets/{candidate['artifact_set_id']}")
    assert isinstance(artifact_set, dict)
    records, _ = await EventStore(stack.connection).load(Aggregate.CANDIDATE, str(candidate["candidate_id"]))
    ran = [r.event for r in records if isinstance(r.event, c.ProbeRequested | c.ProbeCompleted)]
    assert [e.manifest_sha256 for e in ran] == [artifact_set["manifest_sha256"]] * 2  # asked, and run
    approval = await stack.post("/approvals/production", production_approval(candidate["candidate_id"]))
    assert isinstance(approval, dict)
    environment = json.loads(approval["evidence"]["probe_environment"])
    assert environment["manifest_sha256"] == artifact_set["manifest_sha256"]
