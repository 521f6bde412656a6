"""Facts of a candidate that passes every production gate; tests break one fact at a time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec

from gateway.promotion.commands import ApproveProduction
from gateway.promotion.evidence import Evidence
from gateway.promotion.gates import GateFacts
from gateway.promotion.model import (
    SERVING_PROTOCOLS,
    ApprovalState,
    ArtifactSetState,
    CandidateState,
    NodeState,
    ProbeRecord,
)
from streams.events import control as c

NOW = datetime(2026, 1, 1, tzinfo=UTC)
replace = msgspec.structs.replace


def files(*extra: c.ArtifactFile) -> tuple[c.ArtifactFile, ...]:
    return (
        c.ArtifactFile(path="model.onnx", sha256="a" * 64, size=100, format="onnx"),
        c.ArtifactFile(path="tokenizer.json", sha256="b" * 64, size=10, format="tokenizer-json"),
        *extra,
    )


def artifacts(**changes: object) -> ArtifactSetState:
    base = ArtifactSetState(
        artifact_set_id="as-minilm", name="minilm", capability="rag.embedding@1", node_id="node-1",
        root="minilm", files=files(), risk_flags=(), manifest_sha256="m" * 64, source="import:/models/minilm",
        registered_seq=10, verified_manifest="m" * 64,
    )  # fmt: skip
    return replace(base, **changes)


def node(**changes: object) -> NodeState:
    base = NodeState(
        node_id="node-1", hardware_fingerprint="hw-1",
        accelerators=(c.AcceleratorSpec(accelerator_id="node-1-cpu0", kind="cpu", name="cpu", total_bytes=1 << 34),),
        protocol_capabilities=(*SERVING_PROTOCOLS, "deployment.probe.v1"), runtimes=("onnxruntime-cpu",),
        registered_seq=5,
    )  # fmt: skip
    return replace(base, **changes)


def completed(**changes: object) -> c.ProbeCompleted:
    base = c.ProbeCompleted(
        candidate_id="cand-1", probe_id="probe-1", node_id="node-1", accelerator_id="node-1-cpu0",
        hardware_fingerprint="hw-1", runtime="onnxruntime-cpu",
        health=c.HealthLayers(process=True, runtime=True, model=True), output_valid=True,
        baseline_bytes=100, loaded_bytes=300, peak_bytes=350, cold_load_ms=50.0, inference_ms=5.0,
        unload_reclaimed_bytes=150, output_dimension=384, output_normalized=True,
    )  # fmt: skip
    return replace(base, **changes)


def probe(**result_changes: object) -> ProbeRecord:
    return ProbeRecord(
        probe_id="probe-1", node_id="node-1", accelerator_id="node-1-cpu0", lab_approval_id="la-1",
        requested_seq=20, status="completed", result=completed(**result_changes), finished_seq=21,
    )  # fmt: skip


def candidate(**changes: object) -> CandidateState:
    record = probe()
    base = CandidateState(
        candidate_id="cand-1", capability="rag.embedding@1", artifact_set_id="as-minilm",
        runtime_profile={"dimension": "384", "normalized": "true", "input_semantics": "symmetric"},
        deployment_config={"model_name": "minilm"}, probes={record.probe_id: record}, lab_ready_probe="probe-1",
    )  # fmt: skip
    return replace(base, **changes)


def facts(**changes: object) -> GateFacts:
    cand = candidate()
    base = GateFacts(
        candidate=cand, probe=cand.probe("probe-1"), artifacts=artifacts(), node=node(), node_online=True,
        already_production=False, contract_known=True,
    )  # fmt: skip
    return replace(base, **changes)


def lab_approval(**changes: object) -> ApprovalState:
    base = ApprovalState(
        approval_id="la-1", kind="lab_execution", candidate_id="cand-1", node_ids=("node-1",),
        expires_at=NOW + timedelta(hours=1),
    )  # fmt: skip
    return replace(base, **changes)


def approve(evidence: Evidence, **changes: object) -> ApproveProduction:
    """Approving `evidence` (its review is the supply-chain review) by an operator, with a reason."""
    return replace(ApproveProduction("cand-1", evidence, (), "ops-1", "the weekly release"), **changes)
