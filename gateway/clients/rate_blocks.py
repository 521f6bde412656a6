"""Units of a client's per-minute rate that this replica counted ahead, in blocks. Pure.

The rate counter (`MF_LIMITS_RATE`, see `gateway.clients.limits`) hands out its units in order:
an increment of `+k` whose acknowledgement says the total is now `n` got units `n - k + 1 … n`,
and a unit is an admission iff it is at most `rpm`. Counting one unit a request costs a publish and
its acknowledgement a request. For a client far from its rate, a replica counts a block of units
at once and hands them to its next requests of the same window without a message. The limit still
holds across replicas: every unit handed out was counted on the shared counter first, and the
server gives each unit to exactly one increment, so at most `rpm` units at or under `rpm` exist per
window, whichever replica holds them. Units a replica counted and did not use stay counted until
their window ends (then the window no longer matters): other replicas see the client up to a block
nearer its rate than it is, the safe side. Blocks are only counted while the replica's last seen
total plus a block is within half the rate, so near its rate a client is counted one unit a
request, exactly as before; and a block is at most `rpm // BLOCK_SHARE` units, so what replicas may
hold unused is a small share of the rate.
"""

from __future__ import annotations

from typing import Final

BLOCK_MOST: Final = 16  # units counted at once: one rate message per 16 requests, not one each
BLOCK_SHARE: Final = 64  # a block is at most this fraction of the rate (rpm 1024 and up: full blocks)


def counts_in_blocks(rpm: int) -> bool:
    """Whether a client of this rate is ever counted in blocks (a unit its refused request took is
    then kept for the next, not given back; at a small rate one unit a request is counted, as it
    is a large share of the rate)."""
    return rpm // BLOCK_SHARE >= 2


def block_size(rpm: int, seen_total: int | None) -> int:
    """How many units to count for a request whose replica holds none: a block while the last total
    it saw this window leaves room for one within half the rate; else one (no total seen: one)."""
    size = min(BLOCK_MOST, rpm // BLOCK_SHARE)
    if not counts_in_blocks(rpm) or seen_total is None or (seen_total + size) * 2 > rpm:
        return 1
    return size


def usable(rpm: int, total: int, counted: int) -> int:
    """Of the `counted` units an increment got, acknowledged with `total`, how many are admissions
    (those at most `rpm`)."""
    return max(0, min(counted, rpm - (total - counted)))


class RateBlocks:
    """Per client, the window and the number of counted units this replica holds unused."""

    def __init__(self) -> None:
        self._held: dict[str, tuple[int, int]] = {}

    def take(self, client_id: str, window: int) -> bool:
        """Use one held unit of `window` for a request (True), if this replica holds one."""
        window_held, units = self._held.get(client_id, (window, 0))
        if window_held != window or units == 0:
            return False
        self._held[client_id] = (window, units - 1)
        return True

    def keep(self, client_id: str, window: int, units: int) -> None:
        """Hold `units` more of `window` (a block's rest, or a unit a refused request gives back);
        units of an earlier window are dropped."""
        window_held, held = self._held.get(client_id, (window, 0))
        self._held[client_id] = (window, units + (held if window_held == window else 0))

    def held(self, client_id: str, window: int) -> int:
        window_held, units = self._held.get(client_id, (window, 0))
        return units if window_held == window else 0
