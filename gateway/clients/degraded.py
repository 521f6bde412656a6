"""Admitting from a replica's shares while a limit stream has no leader, and publishing the rate
units so admitted once the rate stream answers again.

`gateway.clients.shares` sizes the shares and counts them (pure); `gateway.clients.outage` says
when a stream is leaderless. Here the two meet the wire: a request admitted from the rate share is
a unit owed to the window's shared counter, published (`Nats-Incr: +n`, one message per client
and window) as soon as the rate stream answers, so the window's total afterwards holds every
request admitted in it, and later requests of the window, on every replica, are counted from it.
A publish that fails is kept and tried again the next time the stream answers. A resent publish
whose first copy did land counts those units twice: the safe side, as every limit resend.

Local concurrency slots are only counted here: they have no message, so no other replica sees
them; they end with their requests. Once the concurrency stream answers, new requests take stored
slots again, and this replica counts its local slots still held as taken (`RequestLimiter`): it
never holds more than `max_concurrency` slots, stored and local together.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from gateway.clients.limit_streams import LimitStreams
from gateway.clients.outage import Leaderless
from gateway.clients.shares import LocalRate, LocalSlots, rate_share, slot_share
from streams import subjects

log = logging.getLogger("modelforge.gateway.limits")


class Shares:
    def __init__(self, streams: LimitStreams, saw_total: Callable[[str, int, int], None]) -> None:
        self._streams, self._saw_total = streams, saw_total
        self.rate, self.slots = LocalRate(), LocalSlots()
        self._publishing: asyncio.Task[None] | None = None
        streams.rate.back.append(self._publish_owed)

    def admit_rate(self, client_id: str, window: int, rpm: int, seen_total: int | None) -> bool:
        admitted = self.rate.take(client_id, window, rate_share(rpm, seen_total))
        if admitted:
            self._streams.metrics.local.labels("rate").inc()
        return admitted

    def owe(self, client_id: str, window: int, units: int) -> None:
        """`units` (negative: to give back) that could not be published now; published later."""
        self.rate.restore(client_id, window, units)
        self._publish_owed()

    def give_back_rate(self, client_id: str, window: int) -> None:
        self.rate.give_back(client_id, window)
        self._publish_owed()

    def take_slot(self, group: str, max_concurrency: int, held: int) -> bool:
        taken = self.slots.take(group, slot_share(max_concurrency, held))
        if taken:
            self._streams.metrics.local.labels("concurrency").inc()
        return taken

    def _publish_owed(self) -> None:
        """Publish the owed units now, unless the rate stream is still leaderless (then its return
        calls this again) or a publish is under way (which publishes these too)."""
        if self._streams.rate.since is not None or not self.rate.pending():
            return
        if self._publishing is None or self._publishing.done():
            self._publishing = asyncio.get_running_loop().create_task(self._publish())

    async def _publish(self) -> None:
        while self.rate.pending() and self._streams.rate.since is None:
            failed = []
            for client_id, window, units in self.rate.drain():
                subject = subjects.rate_window_subject(client_id, window)
                try:
                    total = await self._streams.increment(subject, units, degradable=True)
                except Leaderless:
                    failed.append((client_id, window, units))
                except Exception as exc:  # kept for the stream's next return
                    log.warning("owed rate units of %s not published: %r", client_id, exc)
                    failed.append((client_id, window, units))
                else:
                    self._streams.metrics.reconciled.inc(max(units, 0))
                    self._saw_total(client_id, window, total)
            for client_id, window, units in failed:
                self.rate.restore(client_id, window, units)
            if failed:
                return

    async def close(self) -> None:
        """Wait for owed units being published (a closing replica's last chance to)."""
        if self._publishing is not None:
            await asyncio.gather(self._publishing, return_exceptions=True)
