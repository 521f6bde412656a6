"""`modelforge canary share|weights|policy|promote|pause|abort|list|history`: a release engineer's
canary verbs over the admin API (docs/releases.md)."""

from __future__ import annotations

import argparse
from typing import Any
from urllib.parse import quote

from gateway.admin.cli import Build, verb
from gateway.admin.tables import table

GUARD_KINDS = ("error_rate", "p95_latency_ms", "invalid_output_count")


def render_split(split: dict[str, Any]) -> str:
    shares = ", ".join(f"{d} {w}%" for d, w in sorted(split["weights"].items(), key=lambda kv: -kv[1]))
    sticky = " (sticky per client)" if split["sticky"] else ""
    return f"{split['capability']}: {shares}{sticky}"


def render_splits(splits: list[dict[str, Any]]) -> str:
    return "\n".join(map(render_split, splits)) or "no capability has a stable deployment"


def render_changes(rows: list[dict[str, Any]]) -> str:
    return table(
        rows,
        [
            ("SEQ", lambda r: str(r["seq"])),
            ("CAPABILITY", lambda r: r["capability"]),
            ("WEIGHTS", lambda r: ", ".join(f"{d} {w}%" for d, w in sorted(r["weights"].items()))),
            ("WHY", lambda r: r.get("reason") or "-"),
            ("AT", lambda r: str(r.get("changed_at") or "-")),
        ],
    )


def guard(spec: str) -> dict[str, Any]:
    """`kind=threshold[,window=S][,min=N]`, as argparse reads a --guard."""
    head, *options = spec.split(",")
    kind, _, threshold = head.partition("=")
    if kind not in GUARD_KINDS or not threshold:
        raise argparse.ArgumentTypeError(f"expected KIND=THRESHOLD with KIND one of {', '.join(GUARD_KINDS)}")
    out: dict[str, Any] = {"kind": kind, "threshold": _number(threshold)}
    for option in options:
        name, _, value = option.partition("=")
        if name == "window":
            out["window_s"] = _number(value)
        elif name == "min":
            out["min_requests"] = int(_number(value))
        else:
            raise argparse.ArgumentTypeError(f"unknown guard option {name!r} (window=S, min=N)")
    return out


def _number(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None


def _weights(items: list[str]) -> dict[str, int]:
    out = {}
    for item in items:
        deployment, _, weight = item.partition("=")
        if not weight.strip().isdigit():
            raise SystemExit(f"expected DEPLOYMENT=PERCENT, got {item!r}")
        out[deployment] = int(weight)
    return out


def register(subparsers: Any) -> None:
    verbs = subparsers.add_parser(
        "canary", help="canary releases: weights, guards, promote/pause/abort"
    ).add_subparsers(dest="verb", required=True)
    verb(
        verbs, "list", "each capability's split in force", lambda a: ("GET", "/routing", None), render_splits
    )
    history = verb(
        verbs,
        "history",
        "routing weight changes, newest first, with why",
        lambda a: (
            "GET",
            "/routing/changes" + (f"?capability={quote(a.capability)}" if a.capability else ""),
            None,
        ),
        render_changes,
    )
    history.add_argument("--capability", default="")
    share = verb(
        verbs,
        "share",
        "give an experiment PERCENT of its capability's traffic (the stable deployment the rest)",
        lambda a: (
            "POST",
            f"/experiments/{a.id}/share",
            {"weight": a.percent, "sticky": a.sticky, "reason": a.reason},
        ),
        render_split,
    )
    share.add_argument("id")
    share.add_argument("percent", type=int)
    weights = verb(
        verbs,
        "weights",
        "set a capability's whole split: DEPLOYMENT=PERCENT ..., summing to 100",
        lambda a: (
            "POST",
            "/routing",
            {
                "capability": a.capability,
                "weights": _weights(a.split),
                "sticky": a.sticky,
                "reason": a.reason,
            },
        ),
        render_split,
    )
    weights.add_argument("capability")
    weights.add_argument("split", nargs="+")
    for sub in (share, weights):
        sub.add_argument(
            "--sticky", action="store_true", help="the same client always lands on the same deployment"
        )
        sub.add_argument("--reason", default="")
    policy = verb(
        verbs,
        "policy",
        "set an experiment's rollback guards",
        lambda a: (
            "POST",
            f"/experiments/{a.id}/rollback-policy",
            {"guards": a.guard or [], "on_trip": a.on_trip},
        ),
    )
    policy.add_argument("id")
    policy.add_argument(
        "--guard",
        action="append",
        type=guard,
        help="KIND=THRESHOLD[,window=S][,min=N]; KIND: " + ", ".join(GUARD_KINDS),
    )
    policy.add_argument("--on-trip", choices=["unload", "pause"], default="unload")
    for name, help_ in (
        ("promote", "all of the capability's traffic to the experiment"),
        ("pause", "the experiment's weight to 0, kept loaded"),
        ("abort", "the experiment's weight to 0, deactivated and unloaded"),
    ):
        sub = verb(verbs, name, help_, _experiment_op(name), render_split)
        sub.add_argument("id")
        sub.add_argument("--reason", default="")


def _experiment_op(name: str) -> Build:
    return lambda a: ("POST", f"/experiments/{a.id}/{name}", {"reason": a.reason})
