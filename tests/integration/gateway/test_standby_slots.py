"""Warm requests under standby slots on one server: a request that finds a free slot of its
gateway's standby lease runs with no lease of its own, and its resident's use still reaches the
books (the lease's renewal carries it), so a keep-warm TTL does not unload a resident in use."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import httpx
import pytest

from eventstore.store import ExpectedVersion
from gateway.process import STANDBY_LEASES_ENV
from gateway.scheduler.standby import is_standby
from gateway.serving.standby import give_back, take_standby
from streams import subjects
from streams.events import control as c
from streams.events import serving as s
from streams.subjects import Aggregate
from tests.integration.gateway.conftest import Stack
from tests.integration.gateway.residents import embed, holding_standby, serving_ctx
from tests.support.fleet_events import completions, last_sequence, over_commits, stored_events

SLOTS = 2
TTL_S = 2.0  # a keep-warm TTL short enough that a use kept off the books would show


@pytest.fixture(scope="module", autouse=True)
def standby_slots() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as env:
        env.setenv(STANDBY_LEASES_ENV, str(SLOTS))  # set before the module's gateway starts
        yield


async def _residency(stack: Stack, policy: s.ResidencyPolicy) -> None:
    changed = s.ResidencyPolicyChanged(deployment_id=stack.deployment_id, residency=policy)
    await stack.store.append(Aggregate.DEPLOYMENT, stack.deployment_id, [changed], ExpectedVersion.ANY)
    await serving_ctx(stack).live.wait_for(
        lambda: serving_ctx(stack).live.catalog.deployments[stack.deployment_id].residency == policy, 10
    )


async def test_a_warm_request_with_a_free_slot_runs_under_it_and_appends_no_lease_of_its_own(
    stack: Stack,
) -> None:
    ctx = serving_ctx(stack)
    async with httpx.AsyncClient(timeout=60) as http:  # the first request loads the model
        assert (await embed(http, stack, "load")).status_code == 200
        await holding_standby(ctx)
        events_from = await last_sequence(stack.connection, subjects.EVENTS_STREAM) + 1
        requests_from = await last_sequence(stack.connection, subjects.REQUESTS_STREAM) + 1
        served = [await embed(http, stack, f"warm {i}") for i in range(5)]
    assert [r.status_code for r in served] == [200] * 5
    ids = {r.headers["x-request-id"] for r in served}
    completed = await completions(stack.connection, requests_from, ids)
    assert len(completed) == 5
    assert all(is_standby(c.standby_lease_id) for c in completed)
    leased = [
        e.event
        for e in await stored_events(stack.connection, subjects.EVENTS_STREAM, events_from)
        if isinstance(e.event, s.LeaseGranted) and set(e.event.request_ids or [e.event.request_id]) & ids
    ]
    assert leased == []
    assert await over_commits(stack.connection) == []


async def test_a_resident_served_only_under_slots_stays_warm_past_its_keep_warm_ttl(stack: Stack) -> None:
    ctx = serving_ctx(stack)
    accelerator = f"{stack.node}-cpu0"
    async with httpx.AsyncClient(timeout=60) as http:
        assert (await embed(http, stack, "resident")).status_code == 200
        await holding_standby(ctx)
        await _residency(stack, s.ResidencyPolicy(kind="keep_warm", keep_warm_ttl_s=TTL_S))
        try:
            events_from = await last_sequence(stack.connection, subjects.EVENTS_STREAM) + 1
            began, until = time.time(), time.monotonic() + 2.5 * TTL_S
            while time.monotonic() < until:  # in use throughout, every request under a slot
                assert (await embed(http, stack, "in use")).status_code == 200
                await asyncio.sleep(0.2)
            events = [
                e.event for e in await stored_events(stack.connection, subjects.EVENTS_STREAM, events_from)
            ]
            state = ctx.live.accelerators[accelerator]
            (resident,) = [r for r in state.residents if r.deployment_id == stack.deployment_id]
        finally:
            await _residency(stack, s.ResidencyPolicy())
    assert not [e for e in events if isinstance(e, s.ResidencyUnloading)]
    assert not [e for e in events if isinstance(e, s.LeaseGranted) and not is_standby(e.lease_id)]
    used = [e for e in events if isinstance(e, s.LeaseGranted) and e.used_at is not None]
    assert used, "no renewal put the slots' use on the books"
    assert resident.last_used_at > began  # a use made under a slot, on the books


async def test_no_request_takes_a_slot_on_a_node_the_operator_disabled(stack: Stack) -> None:
    ctx = serving_ctx(stack)
    async with httpx.AsyncClient(timeout=60) as http:
        assert (await embed(http, stack, "resident")).status_code == 200
    await holding_standby(ctx)
    taken = take_standby(ctx, stack.deployment_id)
    assert taken is not None
    give_back(ctx, taken.lease_id)
    disabled = c.NodeDisabled(node_id=stack.node, reason="maintenance")
    await stack.store.append(Aggregate.NODE, stack.node, [disabled], ExpectedVersion.ANY)
    try:
        assert await ctx.live.wait_for(lambda: not ctx.live.catalog.nodes[stack.node].schedulable, 10)
        assert take_standby(ctx, stack.deployment_id) is None  # before the upkeep lets the lease go
    finally:
        enabled = c.NodeEnabled(node_id=stack.node)
        await stack.store.append(Aggregate.NODE, stack.node, [enabled], ExpectedVersion.ANY)
        assert await ctx.live.wait_for(lambda: ctx.live.catalog.nodes[stack.node].schedulable, 10)
