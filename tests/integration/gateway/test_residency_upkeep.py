"""Residency policies and lease expiry, carried out by the gateway without a request asking."""

from __future__ import annotations

import shutil
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx

from eventstore.store import ExpectedVersion
from streams import subjects
from streams.envelope import new_id
from streams.events import serving as s
from streams.events.requests import RequestFailed
from streams.subjects import Aggregate
from tests.integration.gateway.conftest import Stack
from tests.support.agents import MINILM, AgentProcess, next_event
from tests.support.serving import events_until, probe, promote, register_artifacts


async def test_an_always_warm_deployment_is_loaded_without_any_request(stack: Stack) -> None:
    if not (stack.root / "minilm-warm").exists():
        shutil.copytree(stack.root / MINILM, stack.root / "minilm-warm")
    artifacts = await register_artifacts(stack.store, stack.node, stack.root, "minilm-warm")
    deployment = await promote(
        stack.store, artifacts, await probe(stack.connection, stack.node, artifacts, stack.root), route="warm"
    )
    policy = s.ResidencyPolicyChanged(
        deployment_id=deployment, residency=s.ResidencyPolicy(kind="always_warm")
    )
    await stack.store.append(Aggregate.DEPLOYMENT, deployment, [policy], ExpectedVersion.ANY)
    loaded = await next_event(
        stack.connection,
        Aggregate.ACCELERATOR,
        f"{stack.node}-cpu0",
        lambda e: isinstance(e, s.ResidencyLoaded) and e.deployment_id == deployment,
    )
    assert loaded.measured_bytes > 0


async def test_a_keep_warm_deployment_is_unloaded_once_idle_for_its_ttl(stack: Stack) -> None:
    policy = s.ResidencyPolicyChanged(
        deployment_id=stack.deployment_id, residency=s.ResidencyPolicy(kind="keep_warm", keep_warm_ttl_s=0.5)
    )
    await stack.store.append(Aggregate.DEPLOYMENT, stack.deployment_id, [policy], ExpectedVersion.ANY)
    async with httpx.AsyncClient(timeout=60) as http:
        response = await http.post(
            f"{stack.gateway.url}/v1/embeddings",
            json={"input": "stay warm a moment", "model": "m"},
            headers={"authorization": f"Bearer {stack.key.key}"},
        )
    assert response.status_code == 200
    unloaded = await next_event(
        stack.connection,
        Aggregate.ACCELERATOR,
        f"{stack.node}-cpu0",
        lambda e: isinstance(e, s.ResidencyUnloaded) and e.deployment_id == stack.deployment_id,
    )
    assert unloaded.reclaimed_bytes >= 0


async def test_a_lease_left_behind_by_a_vanished_gateway_expires_and_its_request_is_failed(
    stack: Stack,
) -> None:
    accelerator = f"{stack.node}-cpu0"
    orphan = s.LeaseGranted(
        lease_id="orphan-lease",
        accelerator_id=accelerator,
        deployment_id=stack.deployment_id,
        request_id="request-of-a-crashed-gateway",
        client_id="gone",
        reserved_bytes=1 << 20,
        expires_at=datetime.fromtimestamp(time.time() + 0.5, UTC),
        decision_fingerprint="crashed-gateway",
    )
    await stack.store.append(Aggregate.ACCELERATOR, accelerator, [orphan], ExpectedVersion.ANY)
    expired = await next_event(
        stack.connection,
        Aggregate.ACCELERATOR,
        accelerator,
        lambda e: isinstance(e, s.LeaseExpired) and e.lease_id == "orphan-lease",
    )
    assert expired.accelerator_id == accelerator
    recorded = await events_until(
        stack.connection,
        subjects.REQUESTS_STREAM,
        lambda e: isinstance(e, RequestFailed) and e.request_id == "request-of-a-crashed-gateway",
    )
    assert recorded[-1].code == "LEASE_TIMEOUT"  # type: ignore[attr-defined]


async def test_an_accelerator_past_its_critical_level_has_that_pressure_booked(
    stack: Stack, scratch: Path
) -> None:
    node = f"tight-{new_id()[:6]}"  # a 64 MiB device: the agent process alone fills it
    agent = AgentProcess(stack.nats_url, node, stack.root, scratch, **{"--cpu-memory-budget": str(64 << 20)})
    await agent.start(stack.connection)
    try:
        changed = await next_event(
            stack.connection,
            Aggregate.ACCELERATOR,
            f"{node}-cpu0",
            lambda e: isinstance(e, s.PressureChanged),
        )
    finally:
        agent.stop()
    assert (changed.previous, changed.current) == ("NORMAL", "CRITICAL")
    assert changed.utilization >= 0.95
