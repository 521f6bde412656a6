"""The rollback guards at work, in every gateway replica: after each new outcome of an experiment
holding a share of its capability's traffic under a rollback policy, judge it; a guard that trips
takes the share back (the event names the guard and its measurement) and, where the policy says
`unload`, deactivates and unloads the experiment.

Every replica judges the same, fleet-wide outcomes: those of the requests every replica served,
followed from MF_REQUESTS (`gateway.operations.fleet_outcomes`), since the split began. Of several
replicas that trip together one appends the change (the stable deployment's expected version) and
only that one unloads; the others decide again on the changed split and find nothing to take."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from gateway.operations.canary import Canary
from gateway.operations.fleet_outcomes import FleetOutcomes
from gateway.operations.guarded_splits import tripped_guards
from gateway.promotion.context import PromotionContext
from streams.codes import ServingError
from streams.events import releases as r

log = logging.getLogger("modelforge.gateway.canary")


async def guard_canaries(promotion: PromotionContext, stop: asyncio.Event) -> None:
    """Judge on every new outcome until `stop`; each trip is acted on once by this replica."""
    ctx, canary = promotion.ctx, Canary(promotion)
    fleet = FleetOutcomes(ctx)
    following = asyncio.create_task(fleet.follow(), name="fleet-outcomes")
    acting: set[str] = set()  # experiments this replica is taking the share back from
    # One event to wait on: waiting on both (a task each, per outcome) cost more than judging.
    stopping = asyncio.ensure_future(stop.wait())
    stopping.add_done_callback(lambda _: ctx.outcomes.changed.set())
    try:
        while not stop.is_set():
            fresh = ctx.outcomes.take_fresh()
            try:
                trips = tripped_guards(ctx.live.catalog, ctx.outcomes, time.time(), fleet.began, fresh)
            except Exception:  # a bug in judging must not stop the guards for the replica's lifetime
                log.exception("judging the canaries failed")
                trips = []
            for stable_id, trip in trips:
                if trip.experiment_id not in acting:
                    acting.add(trip.experiment_id)
                    ctx.spawn(_roll_back(canary, stable_id, trip, acting))
            await ctx.outcomes.changed.wait()
    finally:
        stopping.cancel()
        following.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await following


async def _roll_back(canary: Canary, stable_id: str, trip: r.GuardTrip, acting: set[str]) -> None:
    try:
        await _take_back(canary, stable_id, trip)
    finally:
        acting.discard(trip.experiment_id)


async def _take_back(canary: Canary, stable_id: str, trip: r.GuardTrip) -> None:
    guard = trip.guard
    reason = (
        f"rollback guard {guard.kind} tripped: {trip.observed:g} against the stable's {trip.baseline:g} "
        f"(more than {guard.threshold:g} over {guard.window_s:g} s)"
    )
    try:
        if not await canary.take_back(stable_id, trip.experiment_id, reason, trip):
            return  # another replica took it back first
        log.warning("%s: %s", trip.experiment_id, reason)
        experiment = await canary.promotion.deployment(trip.experiment_id)
        if experiment.rollback is not None and experiment.rollback.on_trip == "unload":
            await canary.withdraw(trip.experiment_id, reason)
    except ServingError as failed:
        log.error("rolling back %s failed: %s %s", trip.experiment_id, failed.code, failed.message)
