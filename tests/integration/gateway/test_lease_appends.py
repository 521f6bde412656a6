"""A lease's appends when the event log is slow or contended: a grant that lands after its request
gave up is given back, with what it planned still carried out; a release that conflicts with
another writer is appended again on the newer version, for a bounded time, then left to the TTL."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Iterator

import pytest

from eventstore.store import ExpectedVersion
from gateway.admin.scheduler import dry_run
from gateway.serving import capacity
from gateway.serving.envelopes import envelope_of
from modelforge.devstack.nats_server import NatsServer
from streams.codes import ServingError
from streams.envelope import new_id
from streams.events import serving as s
from streams.subjects import Aggregate
from tests.integration.gateway.conftest import (
    Stack,
    another_deployment,
    failure_of,
    lease_held,
    release_of,
    serve_directly,
)
from tests.support.agents import aggregate_events, next_event


@contextlib.contextmanager
def _resumed_afterwards(server: NatsServer) -> Iterator[None]:
    """Whatever the block does, the module's nats-server runs again after it (SIGCONT)."""
    try:
        yield
    finally:
        os.kill(server.pid, signal.SIGCONT)


async def test_a_grant_that_lands_after_its_request_timed_out_is_given_back_and_its_load_still_goes_out(
    stack: Stack, module_nats: NatsServer
) -> None:
    # no cap of its own: the search takes no slot on the (soon stopped) server before its append
    deployment = await another_deployment(stack, "minilm-late", "late", caps=s.DeploymentCaps())
    request_id = f"late-{new_id()[:6]}"
    assert stack.gateway.replica is not None
    live = stack.gateway.replica.edge.ctx.live
    late = live.catalog.deployments[deployment]
    # Its cold load fits now (fresh telemetry, nothing pending): the search goes straight to the append.
    assert await live.wait_for(lambda: dry_run(live, late, envelope_of(late).channel).verdict == "ADMIT", 30)

    async def nats_stopped_once_admitted() -> None:
        # The search has begun but decided nothing yet: its lease and load are appended to a
        # server that cannot answer until the request's deadline has passed.
        os.kill(module_nats.pid, signal.SIGSTOP)

    # A deadline the cold load fits (as its probe measured it on this machine, busy or not), so the
    # search admits it and the append, not the scheduler, is what the deadline cuts off.
    timeout_s = late.envelope.cold_load_ms / 1000 + 1.5
    with _resumed_afterwards(module_nats), pytest.raises(ServingError) as timed_out:
        await serve_directly(
            stack, request_id, ["x"], admitted=nats_stopped_once_admitted, model="late", timeout_s=timeout_s
        )
    assert (timed_out.value.code, timed_out.value.http_status) == ("REQUEST_TIMEOUT", 504)
    assert "not recorded before the deadline" in timed_out.value.message
    assert (await failure_of(stack, request_id)).code == "REQUEST_TIMEOUT"
    # Once the server resumes the grant lands; the request is gone, so its lease goes back, and the
    # load it booked is still sent: the agent loads the model.
    assert (await release_of(stack, request_id)).outcome == "cancelled"
    loaded = await next_event(
        stack.connection,
        Aggregate.ACCELERATOR,
        f"{stack.node}-cpu0",
        lambda e: isinstance(e, s.ResidencyLoaded) and e.deployment_id == deployment,
    )
    assert loaded.measured_bytes > 0


async def _released_behind_another_writer(stack: Stack, grant: capacity.Grant) -> int:
    """Release `grant` just after another writer appended to its accelerator; that append's version.
    Both go out on the gateway's own connection, the other writer's first, so the server stores it
    before the release arrives — decided on the version before it, the release conflicts."""
    assert stack.gateway.replica is not None
    ctx = stack.gateway.replica.edge.ctx
    await stack.gateway.settled()
    normal = s.PressureChanged(
        accelerator_id=grant.accelerator_id, previous="NORMAL", current="NORMAL", utilization=0.0
    )
    other = asyncio.ensure_future(
        ctx.store.append(Aggregate.ACCELERATOR, grant.accelerator_id, [normal], ExpectedVersion.ANY)
    )
    releasing = asyncio.ensure_future(capacity.release(ctx, grant, "completed"))
    async with asyncio.timeout(20):
        await releasing
        return await other


async def test_a_release_that_conflicts_with_another_writer_is_appended_again_on_the_newer_version(
    stack: Stack,
) -> None:
    grant = await lease_held(stack, ttl_s=300)
    other = await _released_behind_another_writer(stack, grant)
    records, _ = await stack.store.load(Aggregate.ACCELERATOR, grant.accelerator_id, other)
    released = [
        r for r in records if isinstance(r.event, s.LeaseReleased) and r.event.lease_id == grant.lease_id
    ]
    assert [r.event.outcome for r in released] == ["completed"]  # type: ignore[attr-defined]


async def test_a_release_of_a_lease_already_off_the_books_appends_nothing(stack: Stack) -> None:
    # Releases are retried until recorded or no longer needed: a lease that expired meanwhile (or
    # that its node's loss released) needs no release.
    grant = await lease_held(stack, ttl_s=1)
    await next_event(  # the gateway's upkeep ends it at its TTL
        stack.connection,
        Aggregate.ACCELERATOR,
        grant.accelerator_id,
        lambda e: isinstance(e, s.LeaseExpired) and e.lease_id == grant.lease_id,
    )
    assert stack.gateway.replica is not None
    ctx = stack.gateway.replica.edge.ctx
    await ctx.live.wait_for(lambda: not ctx.live.holds_lease(grant.accelerator_id, grant.lease_id), 10)
    async with asyncio.timeout(10):
        await capacity.release(ctx, grant, "completed")
    events = await aggregate_events(stack.connection, Aggregate.ACCELERATOR, grant.accelerator_id)
    assert not [e for e in events if isinstance(e, s.LeaseReleased) and e.lease_id == grant.lease_id]
