"""How the fleet's requests ended, per deployment under guard: what rollback guards judge
(`gateway.deployments.guard`), fed from MF_REQUESTS (`gateway.operations.fleet_outcomes`). In
memory, bounded per deployment; request content never enters it (a code, a latency, a time).
Whoever waits for a new outcome waits on `changed`, not a timer."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Collection

from gateway.deployments.guard import Outcome
from streams.events.base import Event
from streams.events.requests import RequestCompleted, RequestFailed

KEPT_PER_DEPLOYMENT = 4096  # a guard's window sees at most this many of one deployment's outcomes


class OutcomeLog:
    def __init__(self) -> None:
        self.by_deployment: dict[str, deque[Outcome]] = {}
        self.fresh: set[str] = set()  # deployments with outcomes noted since `take_fresh`
        self.changed = asyncio.Event()

    def note(self, event: Event, at: float | None = None, only: Collection[str] | None = None) -> None:
        """Keep the outcome a request event records (others are no outcome of a deployment); with
        `only`, of those deployments alone."""
        match event:
            case RequestCompleted():
                deployment_id = event.deployment_id
                outcome = Outcome(time.time() if at is None else at, latency_ms=event.latency.total_ms)
            case RequestFailed() if event.deployment_id:
                deployment_id = event.deployment_id
                outcome = Outcome(
                    time.time() if at is None else at,
                    code=event.code,
                    server_failed=event.http_status >= 500,
                    latency_ms=event.latency.total_ms,
                )
            case _:
                return
        if only is not None and deployment_id not in only:
            return
        kept = self.by_deployment.get(deployment_id)
        if kept is None:
            kept = self.by_deployment[deployment_id] = deque(maxlen=KEPT_PER_DEPLOYMENT)
        kept.append(outcome)
        self.fresh.add(deployment_id)
        self.changed.set()

    def take_fresh(self) -> set[str]:
        """The deployments with new outcomes since the last call (and clears `changed`)."""
        fresh, self.fresh = self.fresh, set()
        self.changed.clear()
        return fresh

    def forget(self, deployment_ids: Collection[str]) -> None:
        """Drop the outcomes of these deployments (their split is no longer followed)."""
        for deployment_id in deployment_ids:
            self.by_deployment.pop(deployment_id, None)
            self.fresh.discard(deployment_id)

    def of(self, deployment_id: str) -> list[Outcome]:
        return list(self.by_deployment.get(deployment_id, ()))
