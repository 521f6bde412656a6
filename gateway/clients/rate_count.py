"""This replica's side of a client's requests-per-minute counter (`gateway.clients.limits` describes
the counter): counting a request, from a block this replica holds, with one increment, or from its
share while the rate stream has no leader (`gateway.clients.degraded`); and giving back the unit a
refused request took."""

from __future__ import annotations

from gateway.clients.degraded import Shares
from gateway.clients.limit_streams import LimitStreams
from gateway.clients.model import ClientPrincipal
from gateway.clients.outage import Leaderless
from gateway.clients.rate_blocks import RateBlocks, block_size, counts_in_blocks, usable
from streams import subjects

Counted = tuple[bool, bool]  # (whether the rate admits the request, whether from the share)


class RateCounter:
    def __init__(self, streams: LimitStreams) -> None:
        self._streams = streams
        self.seen: dict[str, tuple[int, int]] = {}  # per client: (window, latest total seen)
        self.blocks = RateBlocks()  # units counted ahead for clients far from their rate
        self.shares = Shares(streams, self.saw)  # admitting while a limit stream has no leader

    async def count(self, principal: ClientPrincipal, window: int, crowded: bool) -> Counted:
        """Count the request in its window: whether the rate admits it (a unit this replica holds
        from a block, or one counted now), and whether from the replica's share (no leader). Either
        way the request holds a counted unit to give back if it is refused (`undo`); the surplus of
        a block that reached past the rate is given back here."""
        client_id, rpm = principal.client_id, principal.requests_per_minute
        if (held := self.from_block(client_id, window)) is not None:
            return held
        seen = self.seen.get(client_id)
        seen_now = seen[1] if seen is not None and seen[0] == window else None
        size = block_size(rpm, None if crowded else seen_now)
        subject = subjects.rate_window_subject(client_id, window)
        try:
            total = await self._streams.increment(subject, size, degradable=True)
        except Leaderless:
            return self.shares.admit_rate(client_id, window, rpm, seen_now), True
        self.saw(client_id, window, total)
        admitted = usable(rpm, total, size)
        if admitted > 1:
            self.blocks.keep(client_id, window, admitted - 1)
        if size > max(admitted, 1):
            await self._give_back(client_id, window, max(admitted, 1) - size)
        return admitted > 0, False

    def from_block(self, client_id: str, window: int) -> Counted | None:
        """The request counted at once, from a block this replica holds (no message), or None."""
        return (True, False) if self.blocks.take(client_id, window) else None

    async def undo(self, principal: ClientPrincipal, window: int, counted: Counted) -> None:
        """Give back the unit a refused request took: to the share, to this replica's block (a
        request the rate admitted, of a client counted in blocks: the next request's), or to the
        shared counter (`-1`)."""
        client_id, (rate_ok, local) = principal.client_id, counted
        if local:
            if rate_ok:
                self.shares.give_back_rate(client_id, window)
        elif rate_ok and counts_in_blocks(principal.requests_per_minute):
            self.blocks.keep(client_id, window, 1)
        else:
            await self._give_back(client_id, window, -1)

    def saw(self, client_id: str, window: int, total: int) -> None:
        self.seen[client_id] = (window, total)

    async def _give_back(self, client_id: str, window: int, units: int) -> None:
        """Take `units` (< 0) off the window's count; owed until the stream answers, if it has no leader."""
        subject = subjects.rate_window_subject(client_id, window)
        try:
            await self._streams.increment(subject, units, degradable=True)
        except Leaderless:
            self.shares.owe(client_id, window, units)
