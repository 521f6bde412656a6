"""An operator's unload and drain, and the upkeep's keep-warm TTL unload, against a lease another
gateway replica grants as they begin (a replica that has not applied the drain yet, or one serving
the idle copy): the unload is decided on the accelerator, so that grant makes it conflict or wait,
and nothing is unloaded while the lease's request runs."""

from __future__ import annotations

import time

import pytest

from eventstore.store import ExpectedVersion
from gateway.operations.service import Operations
from gateway.promotion.context import PromotionContext
from gateway.serving.keeper import upkeep_once
from streams.codes import ServingError
from streams.envelope import Actor, ActorKind
from streams.events import serving as s
from streams.events.base import Event
from streams.subjects import Aggregate
from tests.integration.gateway.conftest import Stack
from tests.integration.gateway.residents import lease_elsewhere, make_resident, release_lease, serving_ctx
from tests.support.agents import next_event

OPERATOR = Actor(ActorKind.OPERATOR, "tests")


async def _after(stack: Stack, accelerator: str, version: int) -> list[Event]:
    records, _ = await stack.store.load(Aggregate.ACCELERATOR, accelerator, version)
    return [r.event for r in records]


def _unloads(events: list[Event], deployment_id: str) -> list[Event]:
    return [
        e
        for e in events
        if (isinstance(e, s.EvictionPlanned) and deployment_id in e.victims)
        or (isinstance(e, s.ResidencyUnloading | s.ResidencyUnloaded) and e.deployment_id == deployment_id)
    ]


async def _first_unload(
    stack: Stack, accelerator: str, granted: int, lease: s.LeaseGranted
) -> s.EvictionPlanned:
    """The deployment's first unload after the grant: an eviction, booked after the lease's release."""
    events = await _after(stack, accelerator, granted)
    ended = next(
        i for i, e in enumerate(events) if isinstance(e, s.LeaseReleased) and e.lease_id == lease.lease_id
    )
    unloads = _unloads(events, stack.deployment_id)
    assert unloads
    assert events.index(unloads[0]) > ended
    assert isinstance(unloads[0], s.EvictionPlanned)
    return unloads[0]


async def test_an_unload_as_another_replica_grants_a_lease_is_refused_busy_and_unloads_nothing(
    stack: Stack,
) -> None:
    accelerator = await make_resident(stack)
    operations = Operations(PromotionContext(serving_ctx(stack), OPERATOR))
    lease, granting = lease_elsewhere(stack, accelerator)
    with pytest.raises(ServingError) as refused:
        await operations.unload(stack.deployment_id)
    granted = await granting
    assert refused.value.code == "DEPLOYMENT_BUSY"
    assert refused.value.details == {"active_requests": 1}
    assert _unloads(await _after(stack, accelerator, granted), stack.deployment_id) == []
    await release_lease(stack, lease)


async def _residency(stack: Stack, policy: s.ResidencyPolicy) -> None:
    """The deployment's residency policy set, and folded into this gateway's view."""
    changed = s.ResidencyPolicyChanged(deployment_id=stack.deployment_id, residency=policy)
    await stack.store.append(Aggregate.DEPLOYMENT, stack.deployment_id, [changed], ExpectedVersion.ANY)
    live = serving_ctx(stack).live
    assert await live.wait_for(lambda: live.catalog.deployments[stack.deployment_id].residency == policy, 5.0)


async def test_a_ttl_unload_as_another_replica_grants_a_lease_waits_until_the_copy_is_idle_again(
    stack: Stack,
) -> None:
    accelerator = await make_resident(stack)
    ctx = serving_ctx(stack)
    # Idle past an hour's TTL only in the rounds this test runs, as of two hours on (the lease
    # outlasts that): the gateway's own upkeep, on the clock, leaves the copy alone meanwhile.
    await _residency(stack, s.ResidencyPolicy(kind="keep_warm", keep_warm_ttl_s=3600))
    later = time.time() + 7200
    try:
        lease, granting = lease_elsewhere(stack, accelerator, expires_in_s=86400)
        await upkeep_once(ctx, later)
        granted = await granting
        await upkeep_once(ctx, later)  # decided on a view that holds the lease: not idle
        await release_lease(stack, lease)
        await upkeep_once(ctx, later)
        await next_event(
            stack.connection,
            Aggregate.ACCELERATOR,
            accelerator,
            lambda e: (
                isinstance(e, s.ResidencyUnloading)
                and e.deployment_id == stack.deployment_id
                and e.reason == "keep_warm_ttl"  # the agent says why: the TTL, no operator
            ),
        )
    finally:
        await _residency(stack, s.ResidencyPolicy())
    first = await _first_unload(stack, accelerator, granted, lease)
    assert first.reason == "keep_warm_ttl"


async def test_an_unload_of_an_always_warm_deployment_is_refused_naming_the_policy_and_unloads_nothing(
    stack: Stack,
) -> None:
    accelerator = await make_resident(stack)
    ctx = serving_ctx(stack)
    version = ctx.live.versions[accelerator]
    await _residency(stack, s.ResidencyPolicy(kind="always_warm"))
    try:
        with pytest.raises(ServingError) as refused:
            await Operations(PromotionContext(ctx, OPERATOR)).unload(stack.deployment_id)
    finally:
        await _residency(stack, s.ResidencyPolicy())
    assert refused.value.code == "DEPLOYMENT_ALWAYS_WARM"
    assert refused.value.http_status == 409
    assert _unloads(await _after(stack, accelerator, version), stack.deployment_id) == []


# Last: it leaves the deployment drained.
async def test_a_drain_as_another_replica_grants_a_lease_unloads_only_once_the_lease_has_ended(
    stack: Stack,
) -> None:
    accelerator = await make_resident(stack)
    ctx = serving_ctx(stack)
    lease, granting = lease_elsewhere(stack, accelerator)
    # The drain waits for the lease to end, bounded by its job timeout; this one is never released
    # while it waits, so the drain is refused and unloads nothing.
    with pytest.raises(ServingError) as refused:
        await Operations(PromotionContext(ctx, OPERATOR, job_timeout_s=1.0)).drain(stack.deployment_id)
    granted = await granting
    assert refused.value.code == "DEPLOYMENT_BUSY"
    assert _unloads(await _after(stack, accelerator, granted), stack.deployment_id) == []
    assert any(r.deployment_id == stack.deployment_id for r in ctx.live.accelerators[accelerator].residents)
    # Once its request has ended, draining again unloads the deployment, after the lease's release.
    await release_lease(stack, lease)
    deployment, reclaimed = await Operations(PromotionContext(ctx, OPERATOR)).drain(stack.deployment_id)
    assert deployment.drained
    assert reclaimed > 0
    first = await _first_unload(stack, accelerator, granted, lease)
    assert first.reason == "drain"
