"""The fleet's request outcomes, for the rollback guards: every replica follows the request events
(MF_REQUESTS) of each capability whose split is under guard, from the start of the longest guard's
window (or of the split, when later), through an ordered consumer filtered to that capability's
`RequestCompleted` and `RequestFailed`. So every replica judges the same, fleet-wide window: the
requests every replica served, its own among them as they were recorded; a replica started after
some of them still counts them. JetStream only: the read model may lag or be down.

A thin edge: what to follow is `guarded_splits` (pure), the outcomes go into the OutcomeLog, the
judging stays pure (`gateway.deployments.guard`). When a split stops being guarded or changes (the
weights, a guard's window) its following stops, its outcomes are dropped, and a changed one is
followed again from its own beginning."""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime

from eventstore.subscription import subscribe
from gateway.operations.guarded_splits import GuardedSplit, guarded_splits
from gateway.serving.context import ServingContext
from streams import subjects
from streams.events import releases as r
from streams.events.requests import RequestCompleted, RequestFailed

log = logging.getLogger("modelforge.gateway.canary")


class FleetOutcomes:
    def __init__(self, ctx: ServingContext) -> None:
        self.ctx = ctx
        self.began: dict[GuardedSplit, float] = {}  # each split followed -> when it began
        self.following: dict[str, tuple[GuardedSplit, asyncio.Task[None]]] = {}  # by stable id
        self.changed = asyncio.Event()  # the catalogue changed: what to follow may have too

    async def follow(self) -> None:
        """Follow what the catalogue puts under guard, as it changes, until cancelled."""
        self.ctx.live.listeners.append(self.changed.set)
        try:
            while True:
                self.changed.clear()
                await self._follow(guarded_splits(self.ctx.live.catalog))
                await self.changed.wait()
        finally:
            self.ctx.live.listeners.remove(self.changed.set)
            for stable_id in list(self.following):
                self._stop(stable_id)

    async def _follow(self, wanted: dict[str, GuardedSplit]) -> None:
        for stable_id, (split, task) in list(self.following.items()):
            if wanted.get(stable_id) != split or task.done():  # (a following that failed starts again)
                self._stop(stable_id)
        for stable_id, split in wanted.items():
            if stable_id in self.following:
                continue
            try:
                began = await self._began(split)
            except Exception:  # (NATS unreachable): tried again on the catalogue's next change
                log.exception("reading when the split of %s began failed", split.capability)
                continue
            if guarded_splits(self.ctx.live.catalog).get(stable_id) != split or stable_id in self.following:
                continue  # changed while its beginning was read: the next pass follows what it is now
            start = max(began, time.time() - split.window_s)
            task = asyncio.create_task(self._outcomes(split, start), name=f"fleet-outcomes-{stable_id}")
            self.following[stable_id] = (split, task)
            self.began[split] = began

    def _stop(self, stable_id: str) -> None:
        split, task = self.following.pop(stable_id)
        task.cancel()
        self.began.pop(split, None)
        self.ctx.outcomes.forget(split.deployments)

    async def _began(self, split: GuardedSplit) -> float:
        """When the split in force began: the time of the last weights change on its stable
        deployment (now, should the log not show one: outcomes from now on)."""
        records, _ = await self.ctx.store.load(subjects.Aggregate.DEPLOYMENT, split.stable_id)
        for record in reversed(records):
            if isinstance(record.event, r.RoutingWeightsChanged) and record.envelope is not None:
                return record.envelope.occurred_at.timestamp()
        return time.time()

    async def _outcomes(self, split: GuardedSplit, start: float) -> None:
        filters = [
            subjects.request_subject(split.capability, kind.event_type())
            for kind in (RequestCompleted, RequestFailed)
        ]
        try:
            async for record in subscribe(
                self.ctx.client,
                stream=subjects.REQUESTS_STREAM,
                filter_subject=filters,
                since_time=datetime.fromtimestamp(start, UTC),
            ):
                event = record.event
                if record.envelope is not None and isinstance(event, RequestCompleted | RequestFailed):
                    at = record.envelope.occurred_at.timestamp()
                    self.ctx.outcomes.note(event, at, only=split.deployments)
        except Exception:  # followed again, from its window's start, on the catalogue's next change
            log.exception("following the outcomes of %s failed", split.capability)
