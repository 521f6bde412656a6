"""Scheduler views from the gateway's live state: budgets per accelerator, a placement dry-run,
the co-residency matrix. Pure functions over `LiveState` values (no I/O)."""

from __future__ import annotations

import itertools
import time
from typing import Any

import msgspec

from gateway.deployments.model import DeploymentState
from gateway.scheduler import (
    Attribution,
    Channel,
    PlacementDecision,
    PlacementRequest,
    account,
    plan_placement,
    required_bytes,
)
from gateway.serving.envelopes import envelope_of, live_envelope
from gateway.state.live import LiveState


def overview(live: LiveState, now: float | None = None) -> dict[str, Any]:
    now = time.time() if now is None else now
    accelerators = []
    for state in live.schedulable_accelerators(now):
        budget = account(state, live.policy, now)
        accelerators.append(
            {
                "accelerator_id": state.accelerator_id,
                "node_id": state.node_id,
                "available": state.available,
                "hardware_model": state.hardware_model,
                "budget": msgspec.to_builtins(budget),
                "residents": msgspec.to_builtins(state.residents),
                "leases": len(state.leases),
                "pressure": state.pressure.level.value,
            }
        )
    return {"policy": msgspec.to_builtins(live.policy), "accelerators": accelerators}


def dry_run(live: LiveState, deployment: DeploymentState, channel: str) -> PlacementDecision:
    now = time.time()
    request = PlacementRequest(channel=Channel(channel))
    return plan_placement(
        live.schedulable_accelerators(now),
        live_envelope(live, deployment)[0],
        request,
        live.policy,
        now,
    )


def co_residency(live: LiveState, proven: dict[tuple[str, str], dict[str, Any]]) -> list[dict[str, Any]]:
    """Pairs of deployments on one accelerator: the latest proof where measured together
    (PROVEN_SAFE / PROVEN_UNSAFE), else what the envelopes lead to expect (EXPECTED_SAFE /
    NOT_SAFE), UNKNOWN without fresh attribution."""
    now = time.time()
    deployments = [d for d in live.catalog.deployments.values() if d.active or d.draining]
    out = []
    for state in live.schedulable_accelerators(now):
        budget = account(state, live.policy, now)
        for a, b in itertools.combinations(sorted(deployments, key=lambda d: d.deployment_id), 2):
            alone_a = required_bytes(envelope_of(a), False, live.policy)
            alone_b = required_bytes(envelope_of(b), False, live.policy)
            key = (a.deployment_id, b.deployment_id)
            room = budget.total_bytes - budget.external_bytes - budget.safety_reserve_bytes
            if key in proven:
                status = proven[key]["state"]
            elif budget.attribution is not Attribution.KNOWN:
                status = "UNKNOWN"
            else:
                status = "EXPECTED_SAFE" if alone_a + alone_b <= room else "NOT_SAFE"
            out.append(
                {
                    "accelerator_id": state.accelerator_id,
                    "deployment_a": a.deployment_id,
                    "deployment_b": b.deployment_id,
                    "expected_combined_bytes": alone_a + alone_b,
                    "room_bytes": room,
                    "status": status,
                    "proof": proven.get(key),
                }
            )
    return out
