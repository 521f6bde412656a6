"""Placement refusals and queueings noted as they are decided, and written off the response's
path: a timer writes each window of identical ones (`gateway.serving.refusals`) when it closes,
through the background writes that retry until recorded. The client's error never waits for it.
A dry run's plan is noted the same way, whatever its verdict (`note_dry_run`).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from gateway.scheduler import PlacementDecision, Verdict
from gateway.serving.background import append_until_recorded
from gateway.serving.context import ServingContext
from gateway.serving.refusals import Noted
from streams.events import serving as s


def refusal_of(
    decision: PlacementDecision, deployment_id: str, request_id: str, dry_run: bool = False
) -> s.PlacementRejected | None:
    """The decision as a `PlacementRejected` on its accelerator, or the closest one it weighed;
    None when it weighed none (no accelerator, no aggregate to put it on)."""
    budget = decision.budget
    accelerator_id = decision.accelerator_id or (budget.accelerator_id if budget is not None else None)
    if accelerator_id is None:
        return None
    return s.PlacementRejected(
        accelerator_id=accelerator_id,
        request_id=request_id,
        deployment_id=deployment_id,
        verdict=decision.verdict.value,
        reason_codes=tuple(reason.value for reason in decision.reason_codes),
        decision_fingerprint=decision.fingerprint,
        first_at=datetime.now(UTC),
        dry_run=dry_run,
        required_bytes=decision.required_bytes,
        schedulable_bytes=budget.schedulable_bytes if budget is not None else None,
    )


def note_refusal(
    ctx: ServingContext,
    decision: PlacementDecision,
    deployment_id: str,
    request_id: str,
    dry_run: bool = False,
) -> None:
    """Count a refused or queued decision in its window (no I/O here: safe under the decision lock)."""
    _note(ctx, refusal_of(decision, deployment_id, request_id, dry_run))


def note_dry_run(ctx: ServingContext, decision: PlacementDecision, deployment_id: str, plan_id: str) -> None:
    """Put a dry run's plan on the record: a refusal or queueing as one (marked a dry run), a plan
    that would admit as a `PlacementDryRun`; counted in windows as refusals are."""
    if decision.verdict.rejects or decision.verdict is Verdict.QUEUE:
        _note(ctx, refusal_of(decision, deployment_id, plan_id, dry_run=True))
        return
    budget = decision.budget
    assert decision.accelerator_id is not None  # an admitting plan names its accelerator
    planned = s.PlacementDryRun(
        accelerator_id=decision.accelerator_id,
        deployment_id=deployment_id,
        verdict=decision.verdict.value,
        reason_codes=tuple(reason.value for reason in decision.reason_codes),
        decision_fingerprint=decision.fingerprint,
        required_bytes=decision.required_bytes,
        schedulable_bytes=budget.schedulable_bytes if budget is not None else None,
        headroom_after_bytes=decision.headroom_after_bytes,
        evictions=decision.evictions,
        cold_load=decision.cold_load,
        first_at=datetime.now(UTC),
    )
    _note(ctx, planned)


def _note(ctx: ServingContext, noted: Noted | None) -> None:
    if noted is None:
        return
    loop = asyncio.get_running_loop()
    _write(ctx, ctx.refusals.add(noted, loop.time()))
    _arm(ctx, loop)


def flush_refusals(ctx: ServingContext) -> None:
    """Write every open window now (the gateway settles or closes)."""
    if ctx.refusal_timer is not None:
        ctx.refusal_timer.cancel()
        ctx.refusal_timer = None
    _write(ctx, ctx.refusals.drain())


def _arm(ctx: ServingContext, loop: asyncio.AbstractEventLoop) -> None:
    closes = ctx.refusals.next_close()
    if ctx.refusal_timer is None and closes is not None:
        ctx.refusal_timer = loop.call_later(max(0.0, closes - loop.time()), _closed, ctx, loop)


def _closed(ctx: ServingContext, loop: asyncio.AbstractEventLoop) -> None:
    ctx.refusal_timer = None
    _write(ctx, ctx.refusals.due(loop.time()))
    _arm(ctx, loop)  # the windows still open


def _write(ctx: ServingContext, refusals: list[Noted]) -> None:
    by_accelerator: dict[str, list[Noted]] = {}
    for refusal in refusals:
        by_accelerator.setdefault(refusal.accelerator_id, []).append(refusal)
    for accelerator_id, events in by_accelerator.items():
        ctx.spawn(append_until_recorded(ctx, accelerator_id, events))
