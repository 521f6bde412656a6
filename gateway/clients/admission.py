"""A request's client-limit check, started at once and settled before its model is invoked.

The check (one JetStream round trip) and the capacity search (another: the acked `LeaseGranted`)
do not depend on each other. When this replica's facts put the client far from its limits
(`RequestLimiter.has_headroom`), the serving path seeks capacity while the check is in flight and
settles it before the invoke, saving a round trip. A refusal then costs only a lease given back.
Near its limits, a client is checked before anything else, as before, so a client pressing past
its rate never churns leases. Either way the refusal's code and its `RequestRejected` are the same.
"""

from __future__ import annotations

import asyncio
import contextlib

from gateway.clients.limits import RequestLimiter
from gateway.clients.model import ClientPrincipal
from gateway.clients.permit import Permit
from streams.codes import ServingError


class Admission:
    def __init__(self, limiter: RequestLimiter, principal: ClientPrincipal) -> None:
        self.overlapped = limiter.has_headroom(principal)  # judged before this request's own count
        self.refused = False
        self._limiter, self._principal = limiter, principal
        self._check: asyncio.Future[Permit] | None = None

    async def settle(self) -> None:
        """Return once the client's limits admit the request; raise their refusal otherwise.

        The first call starts the check. The serving path makes it just after starting its capacity
        search, so the lease reaches NATS ahead of the check's two messages and is answered first.
        """
        if self._check is None:
            self._check = asyncio.ensure_future(self._limiter.acquire(self._principal))
        try:
            # Shielded: a cancelled caller must not leave a half-taken slot; `close` gives it back.
            await asyncio.shield(self._check)
        except ServingError:
            self.refused = True
            raise

    async def close(self) -> None:
        """Give back the concurrency slot, once the check has finished (it may still be in flight)."""
        if self._check is None:
            return
        with contextlib.suppress(Exception):
            permit = await self._check  # a refusal was answered already; it is retrieved here
            await permit.release()
