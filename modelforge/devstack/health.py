"""`modelforge status`: how the embedded stack stands, one line per component. Each process `up`
started is up or down by its pid; the gateway is ready or not by its `/readyz`; the projection is
judged by `GET /admin/v1/projection` (lag per stream, halted streams). `judge` is the pure part;
`observe` asks the processes and the gateway."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import msgspec

from gateway.admin.client import AdminClient, AdminError
from modelforge.devstack import stack
from modelforge.devstack.processes import pid_alive

PROBE_S = 5.0  # how long the gateway may take to answer a status probe


class Process(msgspec.Struct, frozen=True):
    name: str
    pid: int
    alive: bool


class Observed(msgspec.Struct, frozen=True, kw_only=True):
    processes: list[Process]
    gateway_url: str = ""
    ready: bool | None = None  # None: not asked (no gateway process running)
    ready_detail: str = ""
    projection: dict[str, Any] | None = None  # GET /admin/v1/projection's answer
    projection_error: str = ""  # why there is none, when the gateway was asked


class Check(msgspec.Struct, frozen=True):
    component: str
    ok: bool
    detail: str


def _projection(observed: Observed) -> Check:
    status = observed.projection
    if status is None:
        return Check("projection", False, f"unknown: {observed.projection_error or 'the gateway is down'}")
    if status["halted"]:
        where = ", ".join(
            f"{h['stream']} at {h['seq']} ({h['event_type']}): {h['reason']}" for h in status["halted"]
        )
        return Check("projection", False, f"halted: {where}")
    lags = ", ".join(f"{s['stream']} lag {s['lag']}" for s in status["streams"])
    return Check("projection", True, lags or "no projected streams")


def judge(observed: Observed) -> list[Check]:
    """A check per process (up by its pid), the gateway's readiness and the projection."""
    if not observed.processes:
        return [Check("stack", False, "nothing was started here (`modelforge up` starts it)")]
    checks = [
        Check(p.name, p.alive, f"up, pid {p.pid}" if p.alive else f"down (pid {p.pid} is gone)")
        for p in observed.processes
    ]
    if observed.ready is None:
        checks.append(Check("readyz", False, "not asked: no gateway process runs"))
    else:
        state = "ready" if observed.ready else "not ready"
        checks.append(Check("readyz", observed.ready, f"{state}: {observed.ready_detail}"))
    checks.append(_projection(observed))
    return checks


def render(checks: list[Check]) -> str:
    return "\n".join(f"{c.component:<11} {'ok' if c.ok else 'DOWN':<5} {c.detail}" for c in checks)


def _readiness(url: str) -> tuple[bool, str]:
    try:
        with urllib.request.urlopen(f"{url}/readyz", timeout=PROBE_S) as response:
            return True, f"{url}/readyz answered {response.status}"
    except urllib.error.HTTPError as refused:
        return False, f"{url}/readyz answered {refused.code}: {refused.read()[:200].decode(errors='replace')}"
    except (urllib.error.URLError, OSError) as unreachable:
        return False, f"{url}/readyz: {getattr(unreachable, 'reason', unreachable)}"


def observe(home: Path) -> Observed:
    state = stack.load_state(home)
    servers = [
        ("nats", state.nats),
        *((member.name, member) for member in state.cluster),
        ("postgres", state.postgres),
    ]
    processes = [Process(name, server.pid, pid_alive(server.pid)) for name, server in servers if server]
    processes += [Process(c.name, c.pid, pid_alive(c.pid)) for c in state.components]
    url = state.extra.get("gateway_url", "")
    if not any(p.name == "gateway" and p.alive for p in processes) or not url:
        return Observed(processes=processes, gateway_url=url)
    ready, detail = _readiness(url)
    token_file = home / "operator-token"  # read, never made here (stack.operator_token makes it)
    token = token_file.read_text().strip() if token_file.exists() else ""
    client = AdminClient(url, token, operator="status")
    try:
        projection = client.call("GET", "/projection", timeout=PROBE_S)
    except AdminError as error:
        return Observed(
            processes=processes, gateway_url=url, ready=ready, ready_detail=detail,
            projection_error=f"{error.code}: {error.message}",
        )  # fmt: skip
    return Observed(
        processes=processes, gateway_url=url, ready=ready, ready_detail=detail, projection=projection
    )


def as_json(home: Path, checks: list[Check]) -> str:
    """stack.json's fields, as `status --json` printed them before it checked anything, and the checks."""
    state: dict[str, Any] = msgspec.to_builtins(stack.load_state(home))
    return json.dumps({**state, "checks": msgspec.to_builtins(checks)}, indent=2, sort_keys=True)
