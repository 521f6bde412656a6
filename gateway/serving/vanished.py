"""Requests a vanished gateway replica left open, failed on the record by a survivor.

A replica that dies mid-request says nothing more about it. A request that held a lease of its
own is failed when that lease expires (`record_lease_timeout`, from the lease's `request_id`). A
request under a slot of the replica's standby lease, or one still waiting in its line, names no
lease of its own; but a replica that is alive renews its standby leases well before they expire,
so the expiry of one (`fail_left_open`) says its holder is gone, and every request that holder
accepted (`RequestAccepted.gateway_id`, the read model's `requests.accepted_by`) and never
finished is failed the same way. Requests named by a lease still on the books are left to that
lease's own expiry, so none is failed twice.

Which requests those are, the read model says, once its projector has applied all of MF_REQUESTS
there was at the expiry: a request it has not seen finish may have. A projector that is behind,
restarting or down is waited for, on its commit notifications, off the upkeep round (which goes on
meanwhile), for up to `CATCH_UP_WAIT_S`; the survivor closing ends the wait.
"""

from __future__ import annotations

import asyncio
import logging

from gateway.read_models import ReadModel
from gateway.scheduler.standby import replica_of
from gateway.serving.context import ServingContext
from streams import subjects
from streams.events import requests as r
from streams.events import serving as s

log = logging.getLogger("modelforge.gateway.upkeep")
CATCH_UP_WAIT_S = 600.0
_LEFT_OPEN = (
    "SELECT request_id, client_id, capability FROM requests WHERE accepted_by = %s AND status = 'accepted'"
)


async def record_lease_timeout(
    ctx: ServingContext, request_id: str, client_id: str, capability: str, deployment_id: str = ""
) -> None:
    """The request ended without its gateway saying how (it vanished): its history says so. Lease
    TTLs outlast every request deadline, so it is not still running."""
    failed = r.RequestFailed(
        request_id=request_id,
        client_id=client_id,
        capability=capability,
        code="LEASE_TIMEOUT",
        http_status=409,
        deployment_id=deployment_id,
    )
    await ctx.store.record_request(capability, request_id, failed, actor=ctx.actor)


async def fail_left_open(ctx: ServingContext, expired: s.LeaseGranted) -> int:
    """Once this replica has expired another's standby lease (`expired`): fail every request its
    holder accepted and left open, but those a lease on the books still names. The read model is
    asked once the projector has applied all of MF_REQUESTS there is, waited for up to
    `CATCH_UP_WAIT_S`;
    past that (or halted), nothing is failed and a warning says why. How many it failed."""
    holder = replica_of(expired.client_id)
    model = ctx.read_models.get()
    if not holder or holder == ctx.gateway_id or model is None:
        return 0
    last = (await ctx.client.jetstream().stream_info(subjects.REQUESTS_STREAM)).state.last_seq
    stale = await _applied_through(ctx, model, last)
    if stale is not None:
        log.warning("requests gateway %s left open are not failed: %s", holder, stale)
        return 0
    leased = {
        request_id
        for grant in ctx.live.lease_grants.values()
        for request_id in (grant.request_ids or [grant.request_id])
    }
    failed = 0
    for row in await model.query(_LEFT_OPEN, (holder,)):
        if row["request_id"] not in leased:
            await record_lease_timeout(ctx, row["request_id"], row["client_id"], row["capability"])
            failed += 1
    if failed:
        log.warning("gateway %s vanished: %d request(s) it left open recorded failed", holder, failed)
    return failed


async def _applied_through(ctx: ServingContext, model: ReadModel, sequence: int) -> str | None:
    """None once the read model has applied MF_REQUESTS through `sequence`; else why not (behind
    after `CATCH_UP_WAIT_S`, halted, or this replica closing first)."""
    checking = asyncio.ensure_future(model.stale_because(0, sequence, timeout=CATCH_UP_WAIT_S))
    closing = asyncio.ensure_future(ctx.closing.wait())
    try:
        await asyncio.wait([checking, closing], return_when=asyncio.FIRST_COMPLETED)
    finally:
        closing.cancel()
        if not checking.done():
            checking.cancel()
    if checking.cancelled():
        return "this gateway is closing"
    return checking.result()
