"""Each production gate refused for real, through the admin API: the refusal carries the gate's
code and appends nothing to the event log."""

from __future__ import annotations

import pickle
from pathlib import Path

import msgspec
import pytest

from eventstore.store import EventStore, ExpectedVersion
from streams.events import control as c
from streams.subjects import Aggregate
from tests.integration.promotion.conftest import (
    EMBEDDING_PROFILE,
    Stack,
    lab_ready_candidate,
    probed_candidate,
    production_approval,
    refused,
)

pytestmark = pytest.mark.timeout(300)


async def test_a_pickle_file_in_the_set_is_refused(stack: Stack, model_copy: Path) -> None:
    (model_copy / "pytorch_model.bin").write_bytes(pickle.dumps({"weights": [1, 2, 3]}, protocol=4))
    candidate = await lab_ready_candidate(stack, model_copy, "with-pickle")
    await refused(
        stack, "/approvals/production", production_approval(candidate["candidate_id"]), "PICKLE_PRESENT"
    )


async def test_a_remote_code_flag_is_refused(stack: Stack, model_copy: Path) -> None:
    (model_copy / "modeling_custom.py").write_text("class Model: ...\n")
    candidate = await lab_ready_candidate(stack, model_copy, "with-remote-code")
    body = production_approval(candidate["candidate_id"])
    await refused(stack, "/approvals/production", body, "REMOTE_CODE_REQUIRED")


async def test_an_unprobed_candidate_is_not_lab_ready(stack: Stack, minilm_source: Path) -> None:
    imported = await stack.post(
        "/artifact-sets/import",
        {"source": str(minilm_source), "name": "unprobed", "node_id": stack.node,
         "artifact_root": str(stack.artifact_root)},
    )  # fmt: skip
    assert isinstance(imported, dict)
    await stack.post(
        "/candidates",
        {"candidate_id": "cand-unprobed", "artifact_set_id": imported["artifact_set_id"],
         "runtime_profile": {"dimension": "384", "normalized": "true", "input_semantics": "symmetric"}},
    )  # fmt: skip
    await refused(
        stack, "/approvals/production", production_approval("cand-unprobed"), "CANDIDATE_NOT_LAB_READY"
    )


async def test_a_missing_probe_is_refused(stack: Stack, minilm_source: Path) -> None:
    candidate = await lab_ready_candidate(stack, minilm_source, "probe-missing")
    body = production_approval(candidate["candidate_id"], probe_id="no-such-probe")
    await refused(stack, "/approvals/production", body, "RUNTIME_PROBE_REQUIRED")


async def test_a_declared_space_the_model_does_not_produce_is_refused(
    stack: Stack, minilm_source: Path
) -> None:
    """MiniLM gives 384-dimensional unit vectors: a profile declaring 1024 must not pass the probe."""
    liar = {
        **EMBEDDING_PROFILE,
        "dimension": "1024",
        "normalized": "false",
        "truncatable_dimensions": "768,512",
    }
    candidate = await probed_candidate(stack, minilm_source, "declares-1024", liar)
    assert candidate["status"] == "registered", "a mismatched profile must not become lab_ready"
    (probe,) = candidate["probes"]  # type: ignore[misc]
    assert probe["status"] == "completed"
    assert (probe["result"]["output_dimension"], probe["result"]["output_normalized"]) == (384, True)
    assert probe["output_mismatch"] == "the profile declares dimension 1024, the probe measured 384"
    body = production_approval(candidate["candidate_id"], probe_id=probe["probe_id"])
    error = await refused(stack, "/approvals/production", body, "CANDIDATE_NOT_LAB_READY")
    assert "INVALID_OUTPUT" in error["error"]["details"]["failed_gates"]


async def test_a_probe_that_measured_no_memory_is_refused(stack: Stack, minilm_source: Path) -> None:
    """A second probe of a lab_ready candidate whose agent read no memory taken by the model (loaded
    == baseline, no weights named: a probe recorded before they were) cannot be what a production
    approval, and so the deployment's envelope, rests on."""
    candidate = await lab_ready_candidate(stack, minilm_source, "no-memory")
    (measured,) = candidate["probes"]  # type: ignore[misc]
    result = msgspec.convert(measured["result"], c.ProbeCompleted)
    blind = msgspec.structs.replace(
        result, probe_id="probe-no-memory", loaded_bytes=result.baseline_bytes, weights_bytes=0
    )
    requested = c.ProbeRequested(
        candidate_id=result.candidate_id, probe_id=blind.probe_id, node_id=result.node_id,
        accelerator_id=result.accelerator_id, lab_approval_id=str(candidate["lab_approval_id"]),
    )  # fmt: skip
    store = EventStore(stack.connection)
    await store.append(Aggregate.CANDIDATE, result.candidate_id, [requested, blind], ExpectedVersion.ANY)
    body = production_approval(result.candidate_id, probe_id=blind.probe_id)
    await refused(stack, "/approvals/production", body, "RUNTIME_PROBE_REQUIRED")


async def test_a_disabled_node_is_refused(stack: Stack, minilm_source: Path) -> None:
    candidate = await lab_ready_candidate(stack, minilm_source, "node-disabled")
    await stack.post(f"/nodes/{stack.node}", {"enabled": False, "reason": "maintenance"})
    try:
        await refused(
            stack, "/approvals/production", production_approval(candidate["candidate_id"]), "NO_ELIGIBLE_NODE"
        )
    finally:
        await stack.post(f"/nodes/{stack.node}", {"enabled": True})


async def test_an_artifact_set_quarantined_after_approval_makes_it_stale(
    stack: Stack, model_copy: Path
) -> None:
    candidate = await lab_ready_candidate(stack, model_copy, "changed-later")
    approval = await stack.post("/approvals/production", production_approval(candidate["candidate_id"]))
    assert isinstance(approval, dict)
    await stack.post(f"/artifact-sets/{candidate['artifact_set_id']}/quarantine", {"reason": "recalled"})
    stale = await stack.get(f"/approvals/{approval['approval_id']}")
    assert isinstance(stale, dict)
    assert stale["status"] == "stale"
    assert "artifact_status" in stale["stale_facts"]
    body = {"candidate_id": candidate["candidate_id"], "approval_id": approval["approval_id"]}
    await refused(stack, "/deployments", body, "PRODUCTION_APPROVAL_STALE")


async def test_a_second_stable_deployment_waits_for_the_first_to_drain(
    stack: Stack, model_copy: Path
) -> None:
    first = await lab_ready_candidate(stack, model_copy, "stable-one")
    first_approval = await stack.post("/approvals/production", production_approval(first["candidate_id"]))
    assert isinstance(first_approval, dict)
    one = await stack.post(
        "/deployments", {"candidate_id": first["candidate_id"], "approval_id": first_approval["approval_id"]}
    )
    assert isinstance(one, dict)
    (model_copy / "VERSION").write_text("2\n")
    second = await lab_ready_candidate(stack, model_copy, "stable-two")
    approval = await stack.post("/approvals/production", production_approval(second["candidate_id"]))
    assert isinstance(approval, dict)
    body = {"candidate_id": second["candidate_id"], "approval_id": approval["approval_id"]}
    await refused(stack, "/deployments", body, "STABLE_DEPLOYMENT_EXISTS")
    drained = await stack.post(f"/deployments/{one['deployment_id']}/drain", {"reason": "replaced"})
    assert isinstance(drained, dict)
    assert drained["status"] == "drained"
    two = await stack.post("/deployments", body)
    assert isinstance(two, dict)
    assert two["created"] is True
    assert two["reindex_required"] is True  # another artifact set: another embedding space
