"""A deployment's caps, across every gateway replica: at most `max_concurrency` of its requests run
at once, at most `max_queue_depth` more wait for one of them, and the rest are refused
QUEUE_FULL (429), as the reference refused work past a deployment's queue depth.

Both caps are slots of the kind that holds a client's concurrency (`RequestLimiter.take_slot`,
docs/limits.md), so they are exactly as exact: a running request holds one of the deployment's
`run` slots and a waiting one one of its `wait` slots, each a TTL'd message that only one holder
can create, whatever the number of replicas. A request that finds every run slot held takes a
wait slot (none free: QUEUE_FULL), then waits for a run slot on the notices holders publish as
they let one go (`streams.subjects.slot_freed_subject`), until its deadline (REQUEST_TIMEOUT, as
the reference's bounded queue). A holder that crashed frees its slot by TTL without a notice, so
a waiter also tries again once per TTL.

The capacity search takes the run slot before it seeks a lease and lets it go once the lease is
given back (`gateway.serving.capacity`): a deployment's leases on the record overlap at most
`max_concurrency` at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

from nats.aio.client import Client
from nats.aio.subscription import Subscription
from nats.errors import TimeoutError as NatsTimeoutError

from gateway.clients.limits import RequestLimiter
from gateway.clients.permit import Permit
from gateway.deployments.model import DeploymentState
from streams import subjects
from streams.codes import ServingError


def _ignore(_: ServingError | None) -> None:
    pass


class DeploymentGate:
    """One per gateway process: `enter` before a request of a deployment seeks capacity."""

    def __init__(self, limiter: RequestLimiter, client: Client) -> None:
        self._limiter = limiter
        self._nats = client
        self._letting_go: set[asyncio.Task[None]] = set()  # slots taken for requests gone meanwhile

    async def enter(
        self,
        deployment: DeploymentState,
        deadline: float,
        taken: Callable[[ServingError | None], None] = _ignore,
    ) -> Permit | None:
        """One of the deployment's run slots (release it once the request's lease is given back),
        None when it has no cap of its own; QUEUE_FULL or REQUEST_TIMEOUT otherwise. `taken` hears
        as soon as the request runs or has a place in the queue (None), or the queue refused it."""
        caps = deployment.caps
        if caps.max_concurrency <= 0:
            taken(None)
            return None
        run = subjects.deployment_slots(deployment.deployment_id, "run")
        permit = await self._take(run, caps.max_concurrency)
        if permit is None:
            permit = await self._queue(deployment, run, deadline, taken)
        else:
            taken(None)
        return permit

    async def _queue(
        self,
        deployment: DeploymentState,
        run: str,
        deadline: float,
        taken: Callable[[ServingError | None], None],
    ) -> Permit:
        caps = deployment.caps
        waiting = None
        if caps.max_queue_depth > 0:
            group = subjects.deployment_slots(deployment.deployment_id, "wait")
            waiting = await self._take(group, caps.max_queue_depth)
            if waiting is not None:
                waiting.announce = False  # nobody waits for a place in the queue: they are refused
        if waiting is None:
            full = ServingError(
                "QUEUE_FULL",
                f"the capability's queue is full: {caps.max_concurrency} requests of this deployment "
                f"run and {caps.max_queue_depth} wait",
                details={"max_concurrency": caps.max_concurrency, "max_queue_depth": caps.max_queue_depth},
            )
            taken(full)
            raise full
        taken(None)
        try:
            # Subscribed before the next try, so a slot let go after that try is heard of.
            freed = await self._nats.subscribe(subjects.slot_freed_subject(run))
            try:
                return await self._wait_for_slot(freed, run, caps.max_concurrency, deadline)
            finally:
                await freed.unsubscribe()
        finally:
            await waiting.release()

    async def _wait_for_slot(self, freed: Subscription, run: str, size: int, deadline: float) -> Permit:
        while True:
            permit = await self._take(run, size)
            if permit is not None:
                return permit
            remaining = deadline - time.time()
            if remaining <= 0:
                raise ServingError(
                    "REQUEST_TIMEOUT", "no request of this deployment finished before the deadline"
                )
            # a notice, or a TTL's worth of silence (a crashed holder's slot ran out)
            with contextlib.suppress(NatsTimeoutError):
                await freed.next_msg(timeout=min(remaining, self._limiter.slot_ttl_s))

    async def _take(self, group: str, size: int) -> Permit | None:
        """A slot, taken to the end even if the request is cancelled meanwhile (a client refused
        alongside, a disconnect): a slot taken then is let go at once, not held until its TTL (an
        experiment's only slot, for half a minute)."""
        taking = asyncio.ensure_future(self._limiter.take_slot(group, size))
        try:
            return await asyncio.shield(taking)
        except asyncio.CancelledError:
            taking.add_done_callback(self._let_go)
            raise
        except ServingError:
            raise
        except Exception as failed:  # the slot store did not answer (NATS down, a timeout)
            raise ServingError(
                "LIMITS_BACKEND_UNAVAILABLE",
                f"the deployment's concurrency cap could not be checked ({type(failed).__name__})",
            ) from failed

    def _let_go(self, taking: asyncio.Future[Permit | None]) -> None:
        if taking.cancelled() or taking.exception() is not None:
            return
        permit = taking.result()
        if permit is not None:
            task = asyncio.ensure_future(permit.release())
            self._letting_go.add(task)
            task.add_done_callback(self._letting_go.discard)
