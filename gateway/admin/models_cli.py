"""`modelforge models import DIR --capability CAP [--name N]` and `modelforge pipeline run CANDIDATE`:
the guided way from a model folder to a served deployment, through the admin API.

`import` checks the folder against the capability's layout (artifacts/layouts.py) and names every
problem (file, key, what was expected) before anything is recorded; then it imports and verifies
the artifact set and creates the candidate with the profile read from the files. `pipeline run`
walks lab approval → probe → production approval → promotion, saying each gate's verdict in words
and stopping at the first refusal with what to do next.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from artifacts.layouts import problems, profile, read_folder
from gateway.admin.client import AdminClient, AdminError
from nodeagent.settings import ARTIFACT_ROOT_ENV, NODE_ID_ENV

Echo = Callable[[str], None]
NEXT_STEP = {
    "CANDIDATE_NOT_FOUND": "create it: `modelforge models import DIR --capability CAP`",
    "ARTIFACT_NOT_VERIFIED": "verify its files: `modelforge artifacts verify <artifact-set-id>`",
    "STABLE_DEPLOYMENT_EXISTS": "drain the capability's stable deployment first "
    "(`modelforge deployments list`, then `modelforge deployments drain <id>`), and run again",
    "NODE_NOT_FOUND": "start the node's agent (`modelforge agent`, or `./dev up`) or name another with --node",
}
DEFAULT_NEXT = "fix what the message names, then run `modelforge pipeline run` again"


def import_model(
    admin: AdminClient,
    folder: Path,
    capability: str,
    name: str,
    node_id: str,
    echo: Echo,
    artifact_root: str | None = None,
) -> str | None:
    """The candidate's id once imported, else None (every problem echoed, nothing recorded)."""
    config, present, unreadable = read_folder(folder)
    found = [unreadable] if unreadable else problems(capability, config, present)
    if found or config is None:
        echo(f"{folder} is not a {capability} model folder (docs/models.md gives the layout):")
        for problem in found:
            echo(f"  - {problem}")
        return None
    capability = capability if "@" in capability else f"{capability}@1"
    imported = admin.post(
        "/artifact-sets/import",
        {"source": str(folder.resolve()), "name": name, "node_id": node_id,
         "capability": capability, "artifact_root": artifact_root},
    )  # fmt: skip
    set_id = imported["artifact_set_id"]
    echo(f"artifact set {set_id}: {imported.get('status', '')} ({len(present)} files)")
    declared = profile(capability, config)
    candidate_id = f"cand-{name}"
    admin.post(
        "/candidates",
        {"candidate_id": candidate_id, "artifact_set_id": set_id, "capability": capability,
         "runtime_profile": declared, "deployment_config": {"model_name": name}},
    )  # fmt: skip
    described = ", ".join(f"{k}={v}" for k, v in sorted(declared.items())) or "none (fixed by the contract)"
    echo(f"candidate {candidate_id} ({capability}); profile read from the files: {described}")
    echo(f"next: modelforge pipeline run {candidate_id}")
    return candidate_id


def run_pipeline(admin: AdminClient, candidate_id: str, node_id: str, review: str, echo: Echo) -> bool:
    """Each gate in turn; False at the first refusal (said, with the next step)."""
    gate = "lab approval"
    try:
        lab = admin.post("/approvals/lab", {"candidate_id": candidate_id, "node_ids": [node_id]})
        echo(f"✓ lab approval {lab['approval_id']}: the candidate may run on node {node_id}")
        gate = "probe"
        probed = admin.post(f"/candidates/{candidate_id}/probes", {"lab_approval_id": lab["approval_id"]})
        if not _probe_passed(probed, echo):
            return False
        gate = "production approval"
        reason = f"modelforge pipeline run {candidate_id}"
        approval = admin.post(
            "/approvals/production",
            {"candidate_id": candidate_id, "supply_chain_review": review, "reason": reason},
        )
        echo(f"✓ production approval {approval['approval_id']}: every production gate passed")
        gate = "promotion"
        deployment = admin.post(
            "/deployments", {"candidate_id": candidate_id, "approval_id": approval["approval_id"]}
        )
    except AdminError as refused:
        echo(f"✗ {gate} refused: {refused.code}: {refused.message}")
        for failed in refused.details.get("failed_gates", []) or []:
            echo(f"  - gate {failed}")
        echo(f"next: {NEXT_STEP.get(refused.code, DEFAULT_NEXT)}")
        return False
    echo(f"✓ promotion: {deployment['deployment_id']} serves {deployment['capability']} "
         f"as {deployment['model_name']} ({deployment.get('status', '')})")  # fmt: skip
    return True


def _probe_passed(candidate: dict[str, Any], echo: Echo) -> bool:
    probe = (candidate.get("probes") or [{}])[-1]
    result = probe.get("result") or {}
    if candidate.get("status") == "lab_ready":
        echo(f"✓ probe {probe.get('probe_id', '')}: loaded in {result.get('cold_load_ms', 0):.0f} ms, "
             f"peak {result.get('peak_bytes', 0) / 1e6:.0f} MB, output valid, memory reclaimed on unload")  # fmt: skip
        return True
    why = (
        probe.get("output_mismatch")
        or probe.get("failure_detail")
        or probe.get("failure_code")
        or ("the probe did not show layered health, a valid output and reclaimed memory")
    )
    echo(f"✗ probe refused: {why}")
    echo(f"next: {DEFAULT_NEXT}")
    return False


def _node(given: str | None) -> str:
    node = given or os.environ.get(NODE_ID_ENV)
    if not node:
        raise SystemExit(f"name the node: --node (or {NODE_ID_ENV}; `./dev up` sets it for its node)")
    return node


def _cmd_import(args: argparse.Namespace) -> int:
    folder = Path(args.folder)
    name = args.name or folder.resolve().name
    try:
        node, root = _node(args.node), os.environ.get(ARTIFACT_ROOT_ENV) or None
        made = import_model(AdminClient(), folder, args.capability, name, node, print, root)
    except AdminError as refused:
        print(f"refused: {refused.code}: {refused.message}")
        return 1
    return 0 if made else 1


def _cmd_pipeline(args: argparse.Namespace) -> int:
    review = args.review or "operator-run pipeline: files hashed at import and verified by the node agent"
    passed = run_pipeline(
        AdminClient(operator=args.approved_by), args.candidate, _node(args.node), review, print
    )
    return 0 if passed else 1


def register(subparsers: Any) -> None:
    from nodeagent.cli import models_verbs

    imported = models_verbs(subparsers).add_parser(
        "import", help="check a model folder, import it, make a candidate"
    )
    imported.add_argument("folder")
    imported.add_argument("--capability", required=True, help="e.g. rag.embedding@1")
    imported.add_argument("--name", help="the artifact set's and model's name (default: the folder's)")
    imported.add_argument("--node", help=f"the node holding the files (default: {NODE_ID_ENV})")
    imported.set_defaults(handler=_cmd_import)
    pipeline = subparsers.add_parser("pipeline", help="the promotion pipeline").add_subparsers(
        dest="verb", required=True
    )
    run = pipeline.add_parser("run", help="lab approval, probe, production approval, promotion")
    run.add_argument("candidate")
    run.add_argument("--node", help=f"the node to probe on (default: {NODE_ID_ENV})")
    run.add_argument("--approved-by", default=os.environ.get("MODELFORGE_OPERATOR", "cli"))
    run.add_argument("--review", help="the supply-chain review the production approval records")
    run.set_defaults(handler=_cmd_pipeline)
