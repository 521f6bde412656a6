"""`modelforge artifacts|candidates|approvals|deployments|projects|scheduler|projection …`: thin
clients of the admin API (MODELFORGE_GATEWAY_URL, MODELFORGE_OPERATOR_TOKEN). Output is the API's
JSON, or text for a verb with a `render` (a table for a `list`; its `--json` prints the JSON)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gateway.admin import projection_text, tables
from gateway.admin.client import AdminClient, AdminError
from gateway.admin.fetch_bar import fetch_bar

OPERATOR_ENV = "MODELFORGE_OPERATOR"  # the approver `approvals production` records by default
Build = Callable[[argparse.Namespace], tuple[str, str, object]]  # method, path, body
Render = Callable[[Any], str]
Around = Callable[[argparse.Namespace], AbstractContextManager[object]]  # held while the call runs
CALL_S = 300.0  # how long a call may take, beyond a wait it asks the gateway for


def _pairs(items: list[str] | None) -> dict[str, str]:
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"expected key=value, got {item!r}")
        out[key] = value
    return out


def _setting(key: str, value: str) -> float | bool:
    """A policy value as typed: true/false for a switch, else a number (the gateway checks ranges)."""
    if value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    try:
        return float(value)
    except ValueError:
        raise SystemExit(f"{key}: expected a number or true/false, got {value!r}") from None


def verb(
    parser: Any,
    name: str,
    help_: str,
    build: Build,
    render: Render | None = None,
    exit_status: Callable[[Any], int] | None = None,
    around: Around | None = None,
) -> argparse.ArgumentParser:
    """A verb calling the admin API; `exit_status` judges its answer (0 when none is given);
    `around` is held while the call runs (a progress bar)."""
    sub: argparse.ArgumentParser = parser.add_parser(name, help=help_)
    # a verb may take --approved-by (the operator) and --wait-s (how much longer the call may take)
    sub.set_defaults(handler=run(build, render, exit_status, around), operator="cli", wait_s=0.0)
    if render is not None:
        sub.add_argument("--json", action="store_true", help="print the API's JSON")
    return sub


def run(
    build: Build,
    render: Render | None = None,
    exit_status: Callable[[Any], int] | None = None,
    around: Around | None = None,
) -> Callable[[argparse.Namespace], int]:
    def handler(args: argparse.Namespace) -> int:
        method, path, body = build(args)
        try:
            with around(args) if around is not None else nullcontext():
                result = AdminClient(operator=args.operator).call(method, path, body, CALL_S + args.wait_s)
        except AdminError as exc:
            print(f"error {exc.code} ({exc.status}): {exc.message}", file=sys.stderr)
            if exc.details:
                print(f"details {json.dumps(exc.details, sort_keys=True)}", file=sys.stderr)
            return 1
        if render is not None and not args.json:
            print(render(result))
        else:
            print(json.dumps(result, indent=2, sort_keys=True))
        return exit_status(result) if exit_status is not None else 0

    return handler


def listing(verbs: Any, what: str, path: str, columns: Callable[[], list[tables.Column]]) -> None:
    """The `list` verb of `what`: a table of the rows at `path` (their JSON with `--json`)."""
    verb(verbs, "list", what, lambda a: ("GET", path, None), lambda rows: tables.table(rows, columns()))


def register(subparsers: Any) -> None:
    _artifacts(
        subparsers.add_parser("artifacts", help="artifact sets").add_subparsers(dest="verb", required=True)
    )
    _candidates(
        subparsers.add_parser("candidates", help="candidates and probes").add_subparsers(
            dest="verb", required=True
        )
    )
    _approvals(
        subparsers.add_parser("approvals", help="lab and production approvals").add_subparsers(
            dest="verb", required=True
        )
    )
    _deployments(
        subparsers.add_parser("deployments", help="promotion and operations").add_subparsers(
            dest="verb", required=True
        )
    )
    _projects(
        subparsers.add_parser("projects", help="projects and integrations").add_subparsers(
            dest="verb", required=True
        )
    )
    _scheduler(
        subparsers.add_parser("scheduler", help="scheduler policy and views").add_subparsers(
            dest="verb", required=True
        )
    )
    projection = subparsers.add_parser("projection", help="the read model's projection")
    verb(
        projection.add_subparsers(dest="verb", required=True),
        "status",
        "checkpoints and lag per stream, recorded gaps",
        lambda a: ("GET", "/projection", None),
        projection_text.render,
    )


def _artifacts(verbs: Any) -> None:
    imp = verb(
        verbs,
        "import",
        "store a model folder in the artifact bucket, register and verify it",
        lambda a: (
            "POST",
            "/artifact-sets/import",
            {
                "source": str(Path(a.source).resolve()),
                "name": a.name,
                "node_id": a.node,
                "capability": a.capability,
                "artifact_root": a.artifact_root,
                "verify": not a.no_verify,
            },
        ),
        around=lambda a: fetch_bar(f"as-{a.name}"),
    )
    imp.add_argument("source")
    imp.add_argument("--name", required=True)
    imp.add_argument("--node", required=True)
    imp.add_argument("--capability", default="rag.embedding@1")
    imp.add_argument(
        "--artifact-root",
        help="also copy it onto this artifact root on the gateway's machine (default: the gateway's)",
    )
    imp.add_argument("--no-verify", action="store_true")
    listing(verbs, "artifact sets", "/artifact-sets", lambda: tables.ARTIFACT_SETS)
    q = verb(
        verbs,
        "quarantine",
        "quarantine a set",
        lambda a: ("POST", f"/artifact-sets/{a.id}/quarantine", {"reason": a.reason}),
    )
    q.add_argument("id")
    q.add_argument("--reason", default="")
    v = verb(
        verbs,
        "verify",
        "have the node's agent verify a set",
        lambda a: ("POST", f"/artifact-sets/{a.id}/verify", {}),
        around=lambda a: fetch_bar(a.id),
    )
    v.add_argument("id")


def _candidates(verbs: Any) -> None:
    c = verb(
        verbs,
        "create",
        "register a candidate",
        lambda a: (
            "POST",
            "/candidates",
            {
                "candidate_id": a.id,
                "artifact_set_id": a.artifact_set,
                "capability": a.capability,
                "runtime_profile": _pairs(a.profile),
                "deployment_config": _pairs(a.config),
            },
        ),
    )
    c.add_argument("id")
    c.add_argument("--artifact-set", required=True)
    c.add_argument(
        "--capability", help="capability@version (default: the one the artifact set was registered for)"
    )
    c.add_argument("--profile", action="append", help="key=value (dimension, normalized, input_semantics …)")
    c.add_argument("--config", action="append", help="key=value (residency, model_name, max_batch_size …)")
    p = verb(
        verbs,
        "probe",
        "run a runtime probe (waits)",
        lambda a: (
            "POST",
            f"/candidates/{a.id}/probes",
            {"lab_approval_id": a.lab_approval, "node_id": a.node},
        ),
    )
    p.add_argument("id")
    p.add_argument("--lab-approval", required=True)
    p.add_argument("--node")
    listing(verbs, "candidates", "/candidates", lambda: tables.CANDIDATES)


def _approvals(verbs: Any) -> None:
    lab = verb(
        verbs,
        "lab",
        "approve lab execution",
        lambda a: (
            "POST",
            "/approvals/lab",
            {"candidate_id": a.candidate, "node_ids": a.node, "expires_in_s": a.expires_in_s},
        ),
    )
    lab.add_argument("--candidate", required=True)
    lab.add_argument("--node", action="append", required=True)
    lab.add_argument("--expires-in-s", type=float, default=86_400.0, help="more than 0, at most a year")
    prod = verb(
        verbs,
        "production",
        "approve production (gated; records the review, the approver and the reason)",
        lambda a: (
            "POST",
            "/approvals/production",
            {
                "candidate_id": a.candidate,
                "probe_id": a.probe,
                "supply_chain_review": a.review,
                "reason": a.reason,
            },
        ),
    )
    prod.add_argument("--candidate", required=True)
    prod.add_argument("--probe", help="default: the probe that made the candidate lab_ready")
    prod.add_argument(
        "--review", required=True, help="the supply-chain review: where the files come from, what was checked"
    )
    prod.add_argument("--reason", required=True, help="why this goes to production")
    approver = os.environ.get(OPERATOR_ENV, "").strip()
    prod.add_argument(
        "--approved-by",
        dest="operator",
        metavar="NAME",
        default=approver or None,
        required=not approver,
        help=f"who approves, recorded with the approval (default: ${OPERATOR_ENV})",
    )
    rev = verb(
        verbs,
        "revoke",
        "revoke an approval",
        lambda a: ("POST", f"/approvals/{a.id}/revoke", {"reason": a.reason}),
    )
    rev.add_argument("id")
    rev.add_argument("--reason", default="")
    listing(verbs, "approvals", "/approvals", lambda: tables.approvals(datetime.now(UTC)))


def _deployments(verbs: Any) -> None:
    pr = verb(
        verbs,
        "promote",
        "promote to stable",
        lambda a: ("POST", "/deployments", {"candidate_id": a.candidate, "approval_id": a.approval}),
    )
    pr.add_argument("--candidate", required=True)
    pr.add_argument("--approval", required=True)
    for name, help_ in (("drain", "stop routing and unload"), ("unload", "unload a resident deployment")):
        sub = verb(verbs, name, help_, _deployment_op(name))
        sub.add_argument("id")
    pol = verb(
        verbs,
        "policy",
        "change the residency policy",
        lambda a: ("POST", f"/deployments/{a.id}/residency", {"kind": a.kind, "keep_warm_ttl_s": a.ttl}),
    )
    pol.add_argument("id")
    pol.add_argument("kind", choices=["on_demand", "keep_warm", "always_warm"])
    pol.add_argument("--ttl", type=float, default=0.0)
    rep = verb(
        verbs,
        "replicas",
        "change how many copies, and where new ones go",
        lambda a: (
            "POST",
            f"/deployments/{a.id}/replicas",
            {"min": a.min, "max": a.max, "placement": a.placement},
        ),
    )
    rep.add_argument("id")
    rep.add_argument("--min", type=int, default=1)
    rep.add_argument("--max", type=int, default=None, help="default: --min")
    rep.add_argument("--placement", choices=["binpack", "spread"], default="binpack")
    caps = verb(
        verbs,
        "caps",
        "change how many requests run at once (0: no cap) and how many more wait",
        lambda a: (
            "POST",
            f"/deployments/{a.id}/caps",
            {"max_concurrency": a.max_concurrency, "max_queue_depth": a.max_queue_depth},
        ),
    )
    caps.add_argument("id")
    caps.add_argument("--max-concurrency", type=int, default=None, help="default: as it is")
    caps.add_argument("--max-queue-depth", type=int, default=None, help="default: as it is")
    listing(verbs, "deployments", "/deployments", lambda: tables.DEPLOYMENTS)


def _deployment_op(verb: str) -> Build:
    return lambda a: ("POST", f"/deployments/{a.id}/{verb}", {})


def _projects(verbs: Any) -> None:
    reg = verb(
        verbs,
        "register",
        "register a project",
        lambda a: ("POST", "/projects", {"name": a.name, "owner": a.owner}),
    )
    reg.add_argument("name")
    reg.add_argument("--owner", default="")
    bind = verb(
        verbs,
        "bind",
        "bind to a capability channel",
        lambda a: ("POST", f"/projects/{a.id}/channels", {"capability": a.capability, "channel": a.channel}),
    )
    bind.add_argument("id")
    bind.add_argument("capability")
    bind.add_argument("--channel", default="stable")
    client = verb(
        verbs,
        "bind-client",
        "bind a client",
        lambda a: ("POST", f"/projects/{a.id}/clients", {"client_id": a.client}),
    )
    client.add_argument("id")
    client.add_argument("client")
    listing(verbs, "projects", "/projects", lambda: tables.PROJECTS)
    verb(verbs, "integrations", "integrations with usage", lambda a: ("GET", "/integrations", None))


def _scheduler(verbs: Any) -> None:
    pol = verb(
        verbs,
        "policy",
        "revise the scheduler policy",
        lambda a: (
            ("POST", "/scheduler/policy", {"settings": {k: _setting(k, v) for k, v in _pairs(a.set).items()}})
            if a.set
            else ("GET", "/scheduler/policy", None)
        ),
    )
    pol.add_argument("--set", action="append", help="field=value; none: show the policy")
    verb(verbs, "overview", "budgets per accelerator", lambda a: ("GET", "/scheduler/overview", None))
    verb(
        verbs, "residencies", "residencies and each worker's memory", lambda a: ("GET", "/residencies", None)
    )
    dry = verb(
        verbs,
        "dry-run",
        "plan a placement without acting",
        lambda a: ("POST", "/scheduler/dry-run", {"deployment_id": a.deployment, "channel": a.channel}),
    )
    dry.add_argument("deployment")
    dry.add_argument("--channel", default="production", choices=["production", "lab"])
    verb(verbs, "co-residency", "the co-residency matrix", lambda a: ("GET", "/scheduler/co-residency", None))
    verb(verbs, "metrics", "scheduler metrics", lambda a: ("GET", "/scheduler/metrics", None))
