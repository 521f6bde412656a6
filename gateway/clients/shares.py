"""A replica's share of a client's limits while a limit stream has no leader. Pure.

On a cluster, a limit stream whose leader's server died answers nothing until the other servers
elect a new leader (4–9 s, nats-server's Raft timers). Rather than hold every request that needs
a limit message for that long, a replica admits from its *share* of each limit, with no message
(`gateway.clients.degraded` says when): `rate_share` units of the client's rpm for the window and
`slot_share` concurrency slots. A share is `1 / SHARE_OF` of the limit, rounded up (so every client
has one), and never more than this replica itself knows is left (the rpm less the last total it
saw this window; the slots less those it holds).

The gateway knows no count of its live replicas (a replica's queue announcements stop while its
line is empty), so the share is a fixed fraction: the longest election is 9 s, 15 % of a rate
window, so a quarter of the rpm lets a client at its full rate through the election even if all its
requests reach one replica. What it weakens: for the election's seconds, `R` replicas together may
admit up to `R` shares more than the limit allows (only for a client already near its limit).

`LocalRate` counts the units a replica admitted from its share, per client and window, and what of
them is still to be published to the shared counter once the stream answers again: `drain` hands
out the pending units (each exactly once), `restore` puts back those whose publish failed, and a
unit given back (its request refused on concurrency) is taken off what is to be published, or
published as `-1` if it already went out.
"""

from __future__ import annotations

import math
from typing import Final

SHARE_OF: Final = 4  # a replica's share of a limit while its stream has no leader: 1/4, rounded up


def rate_share(rpm: int, seen_total: int | None) -> int:
    """Units of a window a replica may admit with no message: a quarter of the rpm, at most what the
    last total it saw this window (None: none seen) leaves."""
    share = math.ceil(rpm / SHARE_OF)
    return share if seen_total is None else max(0, min(share, rpm - seen_total))


def slot_share(max_concurrency: int, held: int) -> int:
    """Local slots a replica may hold at once with no message: a quarter of the client's, at most
    what the `held` stored slots this replica holds leave."""
    return max(0, min(math.ceil(max_concurrency / SHARE_OF), max_concurrency - held))


class LocalRate:
    """Per client, the units of a window admitted from the share; per (client, window), the units
    still to be published to the shared counter (negative: to be given back)."""

    def __init__(self) -> None:
        self._used: dict[str, tuple[int, int]] = {}  # client -> (window, units admitted locally)
        self._pending: dict[tuple[str, int], int] = {}

    def used(self, client_id: str, window: int) -> int:
        window_used, units = self._used.get(client_id, (window, 0))
        return units if window_used == window else 0

    def take(self, client_id: str, window: int, share: int) -> bool:
        """Admit one request from a share of `share` units (True), if any is left this window."""
        used = self.used(client_id, window)
        if used >= share:
            return False
        self._used[client_id] = (window, used + 1)
        self.restore(client_id, window, 1)
        return True

    def give_back(self, client_id: str, window: int) -> None:
        """A unit `take` admitted whose request was refused after all (its concurrency)."""
        self._used[client_id] = (window, max(0, self.used(client_id, window) - 1))
        self.restore(client_id, window, -1)

    def restore(self, client_id: str, window: int, units: int) -> None:
        """`units` more to be published for the window (a failed publish's, put back)."""
        key = (client_id, window)
        total = self._pending.get(key, 0) + units
        if total:
            self._pending[key] = total
        else:
            self._pending.pop(key, None)

    def pending(self) -> int:
        return sum(abs(units) for units in self._pending.values())

    def drain(self) -> list[tuple[str, int, int]]:
        """Every (client, window, units) still to be published, no longer pending."""
        drained = [(client, window, units) for (client, window), units in self._pending.items()]
        self._pending.clear()
        return drained


class LocalSlots:
    """Per group of a client's slots, how many requests hold a local slot (no message)."""

    def __init__(self) -> None:
        self._in_use: dict[str, int] = {}

    def in_use(self, group: str) -> int:
        return self._in_use.get(group, 0)

    def take(self, group: str, share: int) -> bool:
        if self.in_use(group) >= share:
            return False
        self._in_use[group] = self.in_use(group) + 1
        return True

    def free(self, group: str) -> None:
        left = self.in_use(group) - 1
        if left > 0:
            self._in_use[group] = left
        else:
            self._in_use.pop(group, None)
