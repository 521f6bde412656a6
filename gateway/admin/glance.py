"""What the operator console shows at a glance, as typed answers: request rate and p50/p95 latency
over time per capability, and each deployment with its copies and health in words. Pure functions
over finished requests and the gateway's live state (no I/O); `gateway.admin.console_reads` reads
their inputs and serves them."""

from __future__ import annotations

import math
from collections.abc import Iterable

import msgspec

from gateway.admin.reads import percentile
from gateway.deployments.model import DeploymentState
from gateway.scheduler.state import AcceleratorState, ResidencyState


class Finished(msgspec.Struct, frozen=True):
    """One finished request as the traffic series count it: no content, no client."""

    capability: str
    status: str  # completed | failed | rejected
    total_ms: float | None
    at: float  # when it finished, Unix seconds


class TrafficPoint(msgspec.Struct, frozen=True, kw_only=True):
    at: float  # the bucket's start, Unix seconds
    requests: int
    errors: int  # failed or rejected
    p50_ms: float | None  # of the completed ones (None: none completed)
    p95_ms: float | None


class CapabilityTraffic(msgspec.Struct, frozen=True, kw_only=True):
    capability: str
    requests: int  # in the whole window
    points: list[TrafficPoint]


class Traffic(msgspec.Struct, frozen=True, kw_only=True):
    since: float  # the first bucket's start, Unix seconds
    step_s: int
    capabilities: list[CapabilityTraffic]


def traffic(finished: Iterable[Finished], until: float, window_s: int, step_s: int) -> Traffic:
    """Buckets of `step_s` seconds covering the `window_s` before `until` (the last one holds
    `until`); every capability seen in the window gets every bucket, empty ones included, so a
    chart's x axis is the same for all. Percentiles are nearest rank over completed requests."""
    buckets = max(1, math.ceil(window_s / step_s))
    since = (math.floor(until / step_s) - buckets + 1) * step_s
    counted: dict[str, list[tuple[int, int, list[float]]]] = {}
    for item in finished:
        slot = math.floor((item.at - since) / step_s)
        if not 0 <= slot < buckets:
            continue
        series = counted.setdefault(item.capability, [(0, 0, []) for _ in range(buckets)])
        requests, errors, latencies = series[slot]
        ok = item.status == "completed"
        if ok and item.total_ms is not None:
            latencies.append(item.total_ms)
        series[slot] = (requests + 1, errors + (not ok), latencies)
    return Traffic(
        since=float(since),
        step_s=step_s,
        capabilities=[
            CapabilityTraffic(
                capability=capability,
                requests=sum(n for n, _, _ in series),
                points=[
                    TrafficPoint(
                        at=float(since + i * step_s),
                        requests=n,
                        errors=errors,
                        p50_ms=percentile(latencies, 0.5),
                        p95_ms=percentile(latencies, 0.95),
                    )
                    for i, (n, errors, latencies) in enumerate(series)
                ],
            )
            for capability, series in sorted(counted.items())
        ],
    )


class Copy(msgspec.Struct, frozen=True, kw_only=True):
    accelerator_id: str
    node_id: str
    state: str  # loading | loaded | unloading
    measured_bytes: int
    active_leases: int


class FleetDeployment(msgspec.Struct, frozen=True, kw_only=True):
    deployment_id: str
    capability: str
    model_name: str
    channel: str  # stable | experiment
    status: str  # stable | active | inactive | draining | drained
    replicas_min: int
    replicas_max: int
    residency: str  # on_demand | keep_warm | always_warm
    resident_floor: int  # copies the residency upkeep keeps loaded
    copies: list[Copy]
    health: str  # ok | degraded | idle | off
    health_reason: str  # the health in words


def _health(deployment: DeploymentState, loaded: int, loading: int) -> tuple[str, str]:
    if deployment.drained or deployment.draining:
        return "off", "drained" if deployment.drained else "draining: no new requests"
    if deployment.channel != "stable" and not deployment.active:
        return "off", "experiment inactive: its route takes no requests"
    floor = deployment.resident_floor
    if loaded < floor:
        missing = f"{loaded} of {floor} copies loaded"
        return "degraded", missing + (f", {loading} loading" if loading else "")
    if loaded == 0:
        return "idle", "loads on demand" + (" (loading now)" if loading else ": no copy resident")
    return "ok", f"{loaded} {'copy' if loaded == 1 else 'copies'} loaded"


def fleet(
    deployments: Iterable[DeploymentState], accelerators: Iterable[AcceleratorState]
) -> list[FleetDeployment]:
    """Every deployment with where its copies are and whether it has what it asks to keep."""
    copies: dict[str, list[Copy]] = {}
    for state in sorted(accelerators, key=lambda a: a.accelerator_id):
        for resident in state.residents:
            copies.setdefault(resident.deployment_id, []).append(
                Copy(
                    accelerator_id=state.accelerator_id,
                    node_id=state.node_id,
                    state=resident.state.value,
                    measured_bytes=resident.measured_bytes,
                    active_leases=resident.active_leases,
                )
            )
    out = []
    for deployment in sorted(deployments, key=lambda d: (d.capability, d.deployment_id)):
        held = copies.get(deployment.deployment_id, [])
        loaded = sum(c.state == ResidencyState.LOADED for c in held)
        loading = sum(c.state == ResidencyState.LOADING for c in held)
        health, reason = _health(deployment, loaded, loading)
        out.append(
            FleetDeployment(
                deployment_id=deployment.deployment_id,
                capability=deployment.capability,
                model_name=deployment.model_name,
                channel=deployment.channel,
                status=deployment.status,
                replicas_min=deployment.replicas.min,
                replicas_max=deployment.replicas.max,
                residency=deployment.residency.kind,
                resident_floor=deployment.resident_floor,
                copies=held,
                health=health,
                health_reason=reason,
            )
        )
    return out
