"""A resident copy of the gateway stack's deployment, and a lease of it another gateway replica
grants and gives back: what the operator's unloads and a node's drain are tried against."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

import httpx

from eventstore.store import ExpectedVersion
from gateway.serving.context import ServingContext
from streams.envelope import new_id
from streams.events import serving as s
from streams.subjects import Aggregate
from tests.integration.gateway.conftest import Stack, serve_directly
from tests.support.events import lease_granted


def serving_ctx(stack: Stack) -> ServingContext:
    assert stack.gateway.replica is not None
    return stack.gateway.replica.edge.ctx


async def embed(http: httpx.AsyncClient, stack: Stack, text: str, deadline_ms: int = 0) -> httpx.Response:
    """`text` embedded through the stack's gateway over HTTP (given `deadline_ms`, if any)."""
    headers = {"authorization": f"Bearer {stack.key.key}"}
    if deadline_ms:
        headers["x-request-timeout-ms"] = str(deadline_ms)
    return await http.post(
        f"{stack.gateway.url}/v1/embeddings",
        json={"model": "rag.embedding@1", "input": text},
        headers=headers,
    )


async def holding_standby(ctx: ServingContext) -> str:
    """The standby lease the gateway holds for its deployment, once its upkeep has booked it."""
    for _ in range(200):  # (the upkeep books it on its first rounds after the model is resident)
        assert ctx.standby is not None
        if ctx.standby.held:
            (lease_id,) = ctx.standby.held
            return lease_id
        await asyncio.sleep(0.05)
    raise AssertionError("no standby lease was booked")


async def make_resident(stack: Stack) -> str:
    """The stack's deployment loaded (a request served), every append of the gateway folded in:
    its accelerator."""
    await serve_directly(stack, f"warm-{new_id()[:6]}", ["x"])
    await stack.gateway.settled()
    accelerator = f"{stack.node}-cpu0"
    state = serving_ctx(stack).live.accelerators[accelerator]
    assert any(r.deployment_id == stack.deployment_id for r in state.residents)
    return accelerator


def lease_elsewhere(
    stack: Stack, accelerator: str, expires_in_s: float = 300
) -> tuple[s.LeaseGranted, asyncio.Future[int]]:
    """A lease of the deployment appended as another replica grants one: at the version this
    gateway's view holds (the one the operation reads), sent on the gateway's own connection as
    the operation begins, so the server stores it before anything the operation appends."""
    ctx = serving_ctx(stack)
    expires = datetime.fromtimestamp(time.time() + expires_in_s, UTC)
    lease = lease_granted(f"other-{new_id()[:6]}", accelerator, expires, deployment_id=stack.deployment_id)
    version = ctx.live.versions[accelerator]
    return lease, asyncio.ensure_future(
        ctx.store.append(Aggregate.ACCELERATOR, accelerator, [lease], version)
    )


async def release_lease(stack: Stack, lease: s.LeaseGranted) -> None:
    """The other replica's request ends: its lease goes back (and this gateway has seen it)."""
    released = s.LeaseReleased(
        lease_id=lease.lease_id, accelerator_id=lease.accelerator_id, outcome="completed"
    )
    version = await stack.store.append(
        Aggregate.ACCELERATOR, lease.accelerator_id, [released], ExpectedVersion.ANY
    )
    assert await serving_ctx(stack).live.wait_applied(version)
