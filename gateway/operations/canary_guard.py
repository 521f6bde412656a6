"""The rollback guards at work, in every gateway replica: after each outcome of an experiment this
replica notes (`ctx.outcomes`), judge it when it holds a share of its capability's traffic and has
a rollback policy; a guard that trips takes the share back (the event names the guard and its
measurement) and, where the policy says `unload`, deactivates and unloads the experiment.

Each replica judges the outcomes of the requests it served itself. Of several replicas that trip
together one appends the change (the stable deployment's expected version) and only that one
unloads. A split is judged only on outcomes noted since this replica's pass before it first saw
it: a canary resumed after a rollback starts with a clean window."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection

from gateway.deployments.guard import judge
from gateway.operations.canary import Canary
from gateway.promotion.context import PromotionContext
from gateway.serving.outcomes import OutcomeLog
from gateway.state.catalog import Catalog
from streams.codes import ServingError
from streams.events import releases as r

log = logging.getLogger("modelforge.gateway.canary")

SplitSeen = dict[tuple[str, str, frozenset[tuple[str, int]]], float]  # (stable, experiment, split) -> when


def tripped_guards(
    catalog: Catalog,
    outcomes: OutcomeLog,
    now: float,
    seen: SplitSeen,
    looked: float | None = None,
    fresh: Collection[str] | None = None,
) -> list[tuple[str, r.GuardTrip]]:
    """(stable deployment id, trip) for each experiment with a share whose guard trips now; with
    `fresh`, only experiments among those (new outcomes of their own: what moves their figures
    most, and the stable deployment's many outcomes are not judged each). A split not seen before
    is judged on the outcomes noted since this replica last `looked` (its previous pass: the split
    began after it), else from now."""
    trips = []
    for stable in catalog.deployments.values():
        if stable.channel != "stable" or not stable.weights:
            continue
        split = frozenset(stable.weights.items())
        for experiment_id, weight in stable.weights.items():
            experiment = catalog.deployments.get(experiment_id)
            if (
                weight == 0
                or experiment is None
                or experiment.rollback is None
                or experiment_id == stable.deployment_id
                or (fresh is not None and experiment_id not in fresh)
            ):
                continue
            since = seen.setdefault(
                (stable.deployment_id, experiment_id, split), now if looked is None else looked
            )
            trip = judge(
                experiment.rollback,
                experiment_id,
                outcomes.of(experiment_id),
                outcomes.of(stable.deployment_id),
                now,
                since,
            )
            if trip is not None:
                trips.append((stable.deployment_id, trip))
    return trips


async def guard_canaries(promotion: PromotionContext, stop: asyncio.Event) -> None:
    """Judge on every new outcome until `stop`; each trip is acted on once by this replica."""
    ctx, canary = promotion.ctx, Canary(promotion)
    seen: SplitSeen = {}
    acting: set[str] = set()  # experiments this replica is taking the share back from
    looked = time.time()
    # One event to wait on: waiting on both (a task each, per outcome) cost more than judging.
    stopping = asyncio.ensure_future(stop.wait())
    stopping.add_done_callback(lambda _: ctx.outcomes.changed.set())
    try:
        while not stop.is_set():
            fresh = ctx.outcomes.take_fresh()
            now = time.time()
            try:
                trips = tripped_guards(ctx.live.catalog, ctx.outcomes, now, seen, looked, fresh)
            except Exception:  # a bug in judging must not stop the guards for the replica's lifetime
                log.exception("judging the canaries failed")
                trips = []
            looked = now
            for stable_id, trip in trips:
                if trip.experiment_id not in acting:
                    acting.add(trip.experiment_id)
                    ctx.spawn(_roll_back(canary, stable_id, trip, acting))
            await ctx.outcomes.changed.wait()
    finally:
        stopping.cancel()


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
