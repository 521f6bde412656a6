"""The `list` verbs' rows as tables for a reader: human units for bytes and times, names before
ids. Pure: the rows are the admin API's JSON (what `--json` prints), `now` is passed in."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from tabulate import tabulate

Row = dict[str, Any]
Column = tuple[str, Callable[[Row], object]]  # heading, the cell of a row
_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def human_bytes(n: int | float) -> str:
    size, unit = float(n), 0
    while abs(size) >= 1024 and unit < len(_UNITS) - 1:
        size, unit = size / 1024, unit + 1
    return f"{int(size)} B" if unit == 0 else f"{size:.1f} {_UNITS[unit]}"


def human_duration(seconds: float) -> str:
    """The largest two units: 90 -> 1m 30s, 86400 -> 1d."""
    left, parts = round(abs(seconds)), list[str]()
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)):
        if left >= size or (unit == "s" and not parts):
            parts.append(f"{left // size}{unit}")
            left %= size
    return " ".join(parts[:2])


def human_when(iso: str | None, now: datetime) -> str:
    """An ISO time as how far from `now` it is: 'in 2h 5m', '3m 10s ago' ('-' when none)."""
    if not iso:
        return "-"
    delta = (datetime.fromisoformat(iso) - now).total_seconds()
    return f"in {human_duration(delta)}" if delta >= 0 else f"{human_duration(delta)} ago"


def yes(flag: object) -> str:
    return "yes" if flag else "no"


def table(rows: Sequence[Row], columns: Sequence[Column]) -> str:
    if not rows:
        return "(none)"
    return tabulate(
        [[cell(row) for _, cell in columns] for row in rows],
        headers=[heading for heading, _ in columns],
        tablefmt="simple",
        disable_numparse=True,  # cells are already text in their units
    )


def node_state(row: Row) -> str:
    if row.get("decommissioned"):
        return "decommissioned"
    return "enabled" if row.get("enabled") else "cordoned"


def _accelerators(row: Row) -> str:
    specs = row.get("accelerators") or []
    return ", ".join(f"{a['accelerator_id']} ({a['kind']}, {human_bytes(a['total_bytes'])})" for a in specs)


NODES: list[Column] = [
    ("NODE", lambda r: r["node_id"]),
    ("STATE", node_state),
    ("ONLINE", lambda r: yes(r.get("online"))),
    ("PRODUCTION", lambda r: "eligible" if r.get("production_eligible") else "not eligible"),
    ("ACCELERATORS", _accelerators),
    ("RUNTIMES", lambda r: ", ".join(r.get("runtimes") or [])),
]


def _residency(row: Row) -> str:
    policy = row.get("residency") or {}
    ttl = policy.get("keep_warm_ttl_s") or 0
    return f"{policy.get('kind', '-')} {human_duration(ttl)}" if ttl else str(policy.get("kind", "-"))


def _caps(row: Row) -> str:
    """Running at once / waiting at most: `2/64`, `-/64` without a cap of its own."""
    caps = row.get("caps") or {}
    concurrency = caps.get("max_concurrency", 0)
    return f"{concurrency or '-'}/{caps.get('max_queue_depth', 64)}"


def _replicas(row: Row) -> str:
    """`min-max placement`, e.g. `2-4 spread` (`1 binpack`: one copy, packed)."""
    wanted = row.get("replicas") or {}
    low, high = wanted.get("min", 1), wanted.get("max", 1)
    return f"{low if low == high else f'{low}-{high}'} {row.get('placement') or 'binpack'}"


DEPLOYMENTS: list[Column] = [
    ("MODEL", lambda r: r.get("model_name") or "-"),
    ("DEPLOYMENT", lambda r: r["deployment_id"]),
    ("CAPABILITY", lambda r: r["capability"]),
    ("CHANNEL", lambda r: r["channel"] + (f" ({r['route']})" if r.get("route") else "")),
    ("STATUS", lambda r: r["status"]),
    ("HEALTH", lambda r: r.get("health_status") or "-"),
    ("RESIDENCY", _residency),
    ("REPLICAS", _replicas),
    ("CAPS", _caps),
    ("NEEDS", lambda r: human_bytes((r.get("envelope") or {}).get("required_bytes", 0))),
]

CANDIDATES: list[Column] = [
    ("CANDIDATE", lambda r: r["candidate_id"]),
    ("CAPABILITY", lambda r: r["capability"]),
    ("ARTIFACT SET", lambda r: r["artifact_set_id"]),
    ("STATUS", lambda r: r["status"]),
    ("PROBES", lambda r: str(len(r.get("probes") or []))),
]

ARTIFACT_SETS: list[Column] = [
    ("NAME", lambda r: r["name"]),
    ("ARTIFACT SET", lambda r: r["artifact_set_id"]),
    ("CAPABILITY", lambda r: r["capability"]),
    ("NODE", lambda r: r["node_id"]),
    ("STATUS", lambda r: r["status"]),
    ("SIZE", lambda r: human_bytes(r.get("total_bytes", 0))),
    ("FILES", lambda r: str(len(r.get("files") or []))),
]

PROJECTS: list[Column] = [
    ("NAME", lambda r: r["name"]),
    ("PROJECT", lambda r: r["project_id"]),
    ("OWNER", lambda r: r.get("owner") or "-"),
    ("CHANNELS", lambda r: ", ".join(f"{c}={ch}" for c, ch in sorted((r.get("channels") or {}).items()))),
    ("CLIENTS", lambda r: str(len(r.get("clients") or []))),
]


def approvals(now: datetime) -> list[Column]:
    return [
        ("APPROVAL", lambda r: r["approval_id"]),
        ("KIND", lambda r: r["kind"]),
        ("CANDIDATE", lambda r: r["candidate_id"]),
        ("STATUS", lambda r: r["status"]),
        ("EXPIRES", lambda r: human_when(r.get("expires_at"), now)),
        ("APPROVED BY", lambda r: r.get("approved_by") or "-"),
        ("NODES", lambda r: ", ".join(r.get("node_ids") or []) or "-"),
    ]


def _credential(c: Row, now: datetime) -> str:
    if c.get("revoked"):
        state = "revoked"
    elif c.get("grace_until"):
        state = f"rotated, valid {human_when(c['grace_until'], now)}"
    else:
        state = "active"
    if c.get("expires_at"):
        state += f", expires {human_when(c['expires_at'], now)}"
    return f"{c['key_prefix']}… {state}"


def clients(now: datetime) -> list[Column]:
    return [
        ("NAME", lambda r: r["name"]),
        ("CLIENT", lambda r: r["client_id"]),
        ("STATE", lambda r: "enabled" if r.get("enabled") else "disabled"),
        ("SCOPES", lambda r: ", ".join(r.get("scopes") or [])),
        ("RPM", lambda r: str(r["requests_per_minute"])),
        ("CONCURRENCY", lambda r: str(r["max_concurrency"])),
        ("PRIORITY", lambda r: str(r["priority"])),
        ("PROJECT", lambda r: r.get("project_id") or "-"),
        ("ENVIRONMENT", lambda r: r.get("integration_environment") or "-"),
        ("PURPOSE", lambda r: r.get("purpose") or "-"),
        ("LAST USED", lambda r: human_when(r.get("last_used_at"), now)),
        ("KEYS", lambda r: "; ".join(_credential(c, now) for c in r.get("credentials") or [])),
    ]
