"""`modelforge nodes list|show|cordon|uncordon|drain`: a fleet operator's node verbs over the admin
API. Cordon is the node's disable (placement puts nothing new there); drain cordons and unloads
every copy resident on the node, waiting up to `--wait-s` for running requests to end."""

from __future__ import annotations

from typing import Any

from gateway.admin import tables
from gateway.admin.cli import Render, listing, verb
from gateway.admin.tables import human_bytes
from gateway.identity.cli import register_identity_verbs

DRAIN_INCOMPLETE = 3  # the exit status of a drain that left copies resident (busy or failed)


def render_node(node: dict[str, Any]) -> str:
    return tables.table([node], tables.NODES)


def render_drain(drain: dict[str, Any]) -> str:
    node, lines = drain["node_id"], []
    for copy in drain["unloaded"]:
        lines.append(
            f"unloaded  {copy['deployment_id']} on {copy['accelerator_id']}"
            f" ({human_bytes(copy['reclaimed_bytes'])} reclaimed)"
        )
    for copy in drain["busy"]:
        lines.append(
            f"busy      {copy['deployment_id']} on {copy['accelerator_id']}"
            f" ({copy['active_requests']} requests still running)"
        )
    for copy in drain["failed"]:
        lines.append(
            f"failed    {copy['deployment_id']} on {copy['accelerator_id']}: {copy['code']} {copy['message']}"
        )
    if drain["busy"] or drain["failed"]:
        lines.append(
            f"node {node} cordoned; not drained yet: run the drain again (or with a longer --wait-s)"
        )
    else:
        lines.append(f"node {node} cordoned and drained: nothing resident")
    return "\n".join(lines)


def drain_incomplete(drain: dict[str, Any]) -> int:
    return DRAIN_INCOMPLETE if drain["busy"] or drain["failed"] else 0


def _changed(what: str) -> Render:
    return lambda node: f"node {node['node_id']} {what} (now {tables.node_state(node)})"


def register(subparsers: Any) -> None:
    verbs = subparsers.add_parser("nodes", help="nodes: list, cordon, drain, credentials").add_subparsers(
        dest="verb", required=True
    )
    listing(verbs, "nodes and their liveness", "/nodes", lambda: tables.NODES)
    show = verb(verbs, "show", "one node", lambda a: ("GET", f"/nodes/{a.node}", None), render_node)
    show.add_argument("node")
    cordon = verb(
        verbs,
        "cordon",
        "place nothing new on the node (what is resident stays)",
        lambda a: ("POST", f"/nodes/{a.node}", {"enabled": False, "reason": a.reason}),
        _changed("cordoned"),
    )
    cordon.add_argument("node")
    cordon.add_argument("--reason", default="")
    uncordon = verb(
        verbs,
        "uncordon",
        "take placements on the node again",
        lambda a: ("POST", f"/nodes/{a.node}", {"enabled": True}),
        _changed("uncordoned"),
    )
    uncordon.add_argument("node")
    drain = verb(
        verbs,
        "drain",
        f"cordon, then unload every resident copy (exits {DRAIN_INCOMPLETE} when some are still busy)",
        lambda a: ("POST", f"/nodes/{a.node}/drain", {"reason": a.reason, "wait_s": a.wait_s}),
        render_drain,
        drain_incomplete,
    )
    drain.add_argument("node")
    drain.add_argument("--reason", default="")
    drain.add_argument(
        "--wait-s", type=float, default=0.0, help="wait up to this long, in all, for running requests to end"
    )
    register_identity_verbs(verbs)
