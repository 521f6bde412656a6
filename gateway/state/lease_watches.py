"""Requests in flight watching the lease that carries them, to be told when it leaves the books
with its node (`ResidencyReconciled`: lost, or restarted without what the lease was for), so that
each ends at once and is tried elsewhere instead of at its deadline (`gateway.serving.node_loss`).

A request under a standby slot watches the standby lease; the upkeep renews that lease (a new
grant and the old one's release) while requests run under it, and their watches follow the renewal
from the moment it is decided (`follow`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

# How long a decided renewal is remembered for watches made after it: a request that took a slot
# of the old lease just before the decision watches it an event-loop turn or two later.
RENEWAL_MEMORY_S = 60.0


class LeaseWatches:
    def __init__(self) -> None:
        self._watches: dict[str, tuple[set[str], Callable[[], None]]] = {}  # key -> (carriers, call)
        self._renewed: dict[str, tuple[str, float]] = {}  # lease -> (its successor, when, monotonic)

    def __bool__(self) -> bool:
        return bool(self._watches)

    def watch(self, key: str, ended: Callable[[], None], lease_id: str = "") -> None:
        """Call `ended` if the lease `lease_id` (else `key`), or one that replaced it, leaves the
        books with its node. `key` names this watch, for `unwatch` when done with it: requests
        under one standby lease's slots each watch that lease."""
        carriers = {lease := lease_id or key}
        while lease in self._renewed:  # a slot taken just before its lease's renewal was decided
            lease = self._renewed[lease][0]
            carriers.add(lease)
        self._watches[key] = (carriers, ended)

    def unwatch(self, key: str) -> None:
        self._watches.pop(key, None)

    def follow(self, old: str, new: str) -> None:
        """The watches of lease `old` watch `new` too: a standby lease's renewal, decided (requests
        under its slots run on under the successor; should the node go before the renewal is
        acknowledged, either lease is the one dropped). So does a watch of `old` made within
        `RENEWAL_MEMORY_S`."""
        now = time.monotonic()
        self._renewed = {o: (n, at) for o, (n, at) in self._renewed.items() if now - at < RENEWAL_MEMORY_S}
        self._renewed[old] = (new, now)
        for carriers, _ended in self._watches.values():
            if old in carriers:
                carriers.add(new)

    def dropped(self, before: Iterable[str], after: Iterable[str]) -> None:
        """An accelerator's reconciliation took its leases from `before` to `after`: the watches of
        those it dropped are told (once; they are gone)."""
        gone = set(before) - set(after)
        for key, (carriers, ended) in list(self._watches.items()):
            if not carriers.isdisjoint(gone):
                del self._watches[key]
                ended()
