"""`Permit`: one concurrency slot a request holds, renewed at half-life until released.

The slot is taken, renewed and deleted by `RequestLimiter` (`gateway.clients.limits`, which
describes the mechanism); a `Permit` schedules its renewals (never past the limiter's
`max_hold_s`) and releases the slot exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.clients.limits import RequestLimiter

log = logging.getLogger("modelforge.gateway.limits")


class Permit:
    """One held concurrency slot. Release it exactly once (`release` is idempotent)."""

    def __init__(
        self, limiter: RequestLimiter, group: str, slot: int, sequence: int, renewed_at: float | None = None
    ) -> None:
        loop = asyncio.get_running_loop()
        self.group = group  # the slots it is one of (`streams.subjects.client_slots`, ...)
        self.slot = slot
        self.sequence = sequence
        self.renewed_at = loop.time() if renewed_at is None else renewed_at  # its message's last publish
        self.lost = False  # the slot expired before we renewed it (e.g. after a long partition)
        self.announce = False  # tell those waiting for a slot of the group when it is let go (take_slot)
        self.reusable = False  # a client's slot: may be kept for the replica's next request (acquire)
        self.local = (
            False  # a share's slot while the stream had no leader: no message (gateway.clients.degraded)
        )
        self._limiter = limiter
        self._released = False
        self._renewal: asyncio.TimerHandle | None = None
        self._renewing: asyncio.Task[None] | None = None
        self._renew_until = loop.time() + limiter.max_hold_s

    @property
    def released(self) -> bool:
        return self._released

    async def release(self) -> None:
        if self._released:
            return
        self._released = True
        if self._renewal is not None:
            self._renewal.cancel()
        if self._renewing is not None:
            with contextlib.suppress(Exception):
                await self._renewing
        await self._limiter.release_slot(self)

    def _schedule_renewal(self) -> None:
        # At half-life: a slot kept from an earlier request may be due sooner than a new one.
        loop = asyncio.get_running_loop()
        delay = max(0.0, self.renewed_at + self._limiter.slot_ttl_s / 2 - loop.time())
        self._renewal = loop.call_later(delay, self._start_renewal)

    def _start_renewal(self) -> None:
        if self._released:
            return
        if asyncio.get_running_loop().time() > self._renew_until:
            # A permit nobody released (a caller's bug) must not hold its slot forever: let the TTL end it.
            log.warning(
                "concurrency slot %s.%s held past max_hold_s; letting it expire", self.group, self.slot
            )
            return
        self._renewing = asyncio.create_task(self._renew())

    async def _renew(self) -> None:
        try:
            renewed = await self._limiter.renew_slot(self)
        except Exception as exc:  # keep trying at the next half-life; the TTL still covers us
            log.warning("renewing concurrency slot %s.%s failed: %r", self.group, self.slot, exc)
            renewed = True
        if renewed and not self._released:
            self._schedule_renewal()
