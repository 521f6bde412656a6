"""Residency policies and lease expiry, carried out by the gateway without a request asking."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from eventstore.store import ExpectedVersion
from streams import subjects
from streams.envelope import new_id
from streams.events import serving as s
from streams.events.base import Event
from streams.events.requests import RequestFailed
from streams.subjects import Aggregate
from tests.integration.gateway.conftest import Stack, another_deployment, policy_while
from tests.support.agents import AgentProcess, next_event
from tests.support.events import lease_granted
from tests.support.serving import events_until, stream_refusing_messages


async def _after_appending(stack: Stack, event: Event, wanted: Callable[[Event], bool]) -> Any:
    """Append `event` to the stack's accelerator; then the first of its events that `wanted` matches."""
    accelerator = f"{stack.node}-cpu0"
    await stack.store.append(Aggregate.ACCELERATOR, accelerator, [event], ExpectedVersion.ANY)
    return await next_event(stack.connection, Aggregate.ACCELERATOR, accelerator, wanted)


async def _made_always_warm(stack: Stack, deployment: str, outcome: type[Event]) -> Any:
    """Set `deployment` always-warm; then its first `outcome` event on the stack's accelerator."""
    warm = s.ResidencyPolicyChanged(deployment_id=deployment, residency=s.ResidencyPolicy(kind="always_warm"))
    await stack.store.append(Aggregate.DEPLOYMENT, deployment, [warm], ExpectedVersion.ANY)
    return await next_event(
        stack.connection,
        Aggregate.ACCELERATOR,
        f"{stack.node}-cpu0",
        lambda e: isinstance(e, outcome) and e.deployment_id == deployment,  # type: ignore[attr-defined]
    )


async def test_an_always_warm_deployment_is_loaded_without_any_request(stack: Stack) -> None:
    deployment = await another_deployment(stack, "minilm-warm", "warm")
    loaded = await _made_always_warm(stack, deployment, s.ResidencyLoaded)
    assert loaded.measured_bytes > 0


async def test_an_always_warm_load_whose_job_cannot_be_sent_is_booked_failed(stack: Stack) -> None:
    deployment = await another_deployment(stack, "minilm-warm-unsent", "warm-unsent")
    try:
        async with stream_refusing_messages(stack.connection, subjects.WORK_STREAM):
            failed = await _made_always_warm(stack, deployment, s.ResidencyLoadFailed)
    finally:
        on_demand = s.ResidencyPolicyChanged(deployment_id=deployment, residency=s.ResidencyPolicy())
        await stack.store.append(Aggregate.DEPLOYMENT, deployment, [on_demand], ExpectedVersion.ANY)
    assert failed.code == "CAPABILITY_UNAVAILABLE"
    assert "load job could not be sent" in failed.detail


async def test_a_keep_warm_deployment_is_unloaded_once_idle_for_its_ttl(stack: Stack) -> None:
    policy = s.ResidencyPolicyChanged(
        deployment_id=stack.deployment_id, residency=s.ResidencyPolicy(kind="keep_warm", keep_warm_ttl_s=0.5)
    )
    await stack.store.append(Aggregate.DEPLOYMENT, stack.deployment_id, [policy], ExpectedVersion.ANY)
    try:
        async with httpx.AsyncClient(timeout=60) as http:
            response = await http.post(
                f"{stack.gateway.url}/v1/embeddings",
                json={"input": "stay warm a moment", "model": "all-MiniLM-L6-v2"},
                headers={"authorization": f"Bearer {stack.key.key}"},
            )
        assert response.status_code == 200
        unloading = await next_event(
            stack.connection,
            Aggregate.ACCELERATOR,
            f"{stack.node}-cpu0",
            lambda e: isinstance(e, s.ResidencyUnloading) and e.deployment_id == stack.deployment_id,
        )
        unloaded = await next_event(
            stack.connection,
            Aggregate.ACCELERATOR,
            f"{stack.node}-cpu0",
            lambda e: isinstance(e, s.ResidencyUnloaded) and e.deployment_id == stack.deployment_id,
        )
    finally:  # the tests after this one keep the model resident as long as they need it
        on_demand = s.ResidencyPolicyChanged(deployment_id=stack.deployment_id, residency=s.ResidencyPolicy())
        await stack.store.append(Aggregate.DEPLOYMENT, stack.deployment_id, [on_demand], ExpectedVersion.ANY)
    assert unloading.reason == "keep_warm_ttl"  # the agent says why: the upkeep's TTL
    assert unloaded.reclaimed_bytes >= 0


async def test_a_lease_left_behind_by_a_vanished_gateway_expires_and_its_request_is_failed(
    stack: Stack,
) -> None:
    accelerator = f"{stack.node}-cpu0"
    orphan = lease_granted(
        "orphan-lease",
        accelerator,
        datetime.fromtimestamp(time.time() + 0.5, UTC),
        reserved_bytes=1 << 20,
        deployment_id=stack.deployment_id,
        request_id="request-of-a-crashed-gateway",
    )
    expired = await _after_appending(
        stack, orphan, lambda e: isinstance(e, s.LeaseExpired) and e.lease_id == "orphan-lease"
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
    node = f"tight-{new_id()[:6]}"  # a 32 MiB device: the agent process alone (~55-60 MiB) fills it
    agent = AgentProcess(stack.nats_url, node, stack.root, scratch, **{"--cpu-memory-budget": str(32 << 20)})
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


async def test_a_load_no_agent_reports_on_is_ended_once_the_load_timeout_passes(stack: Stack) -> None:
    lost = s.ResidencyLoadRequested(
        load_id="lost-load",
        accelerator_id=f"{stack.node}-cpu0",
        node_id=stack.node,
        deployment_id="a-deployment-whose-job-was-lost",
        required_bytes=1 << 20,
        reason="request",
    )
    async with policy_while(stack, {"load_timeout_seconds": 0.5}):
        failed = await _after_appending(
            stack, lost, lambda e: isinstance(e, s.ResidencyLoadFailed) and e.load_id == "lost-load"
        )
    assert failed.code == "RESIDENCY_LOAD_FAILED"
    assert "no agent reported" in failed.detail


async def test_an_eviction_victim_nobody_unloads_goes_back_on_the_books_once_the_unload_timeout_passes(
    stack: Stack,
) -> None:
    async with httpx.AsyncClient(timeout=60) as http:  # the stack's model resident
        response = await http.post(
            f"{stack.gateway.url}/v1/embeddings",
            json={"input": "resident, please", "model": "all-MiniLM-L6-v2"},
            headers={"authorization": f"Bearer {stack.key.key}"},
        )
    assert response.status_code == 200
    # An eviction whose unload job was never sent: its victim would stay UNLOADING for ever.
    planned = s.EvictionPlanned(
        eviction_id=f"lost-unload-{new_id()[:6]}",
        accelerator_id=f"{stack.node}-cpu0",
        victims=(stack.deployment_id,),
        for_deployment_id="someone-else",
        required_bytes=1 << 20,
        decision_fingerprint="test",
    )
    async with policy_while(stack, {"unload_timeout_seconds": 0.5}):
        completed = await _after_appending(
            stack,
            planned,
            lambda e: isinstance(e, s.EvictionCompleted) and e.eviction_id == planned.eviction_id,
        )
    back = await next_event(
        stack.connection,
        Aggregate.ACCELERATOR,
        f"{stack.node}-cpu0",
        lambda e: isinstance(e, s.ResidencyUnloadFailed) and e.code == "GPU_MEMORY_NOT_RECLAIMED",
    )
    assert back.deployment_id == stack.deployment_id
    assert (completed.outcome, completed.reclaimed_bytes) == ("failed", 0)
