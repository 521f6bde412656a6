"""Which requests of one deployment share a run: the forming of groups, without I/O.

A request goes alone at once while this gateway has fewer than `after` runs in flight for its
deployment (at low load nothing waits). From `after` on, it joins the group forming for its key
(what must agree for one invoke to serve them all); the oldest group of the deployment departs as
soon as a run in flight ends, and a group departs at once when it holds as many items or bytes as
one run takes. Each group departs counted as a run in flight; `finished` is called once per run.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

Member = TypeVar("Member")


@dataclass(frozen=True)
class Room:
    """What one run takes: its items (a deployment's batch) and payload bytes (what NATS carries)."""

    items: int
    bytes: int


@dataclass
class _Forming(Generic[Member]):
    deployment_id: str
    members: list[Member] = field(default_factory=list)
    sizes: list[tuple[int, int]] = field(default_factory=list)  # each member's (items, bytes)
    items: int = 0
    bytes: int = 0

    def add(self, member: Member, items: int, size: int) -> None:
        self.members.append(member)
        self.sizes.append((items, size))
        self.items += items
        self.bytes += size

    def fits(self, items: int, size: int, room: Room) -> bool:
        return self.items + items <= room.items and self.bytes + size <= room.bytes


class Coalescer(Generic[Member]):
    """Runs in flight per deployment, and the groups forming per key, oldest first.
    `after`: runs in flight from which requests wait to share the next run (0: never)."""

    def __init__(self, after: int) -> None:
        self.after = after
        self.in_flight: dict[str, int] = {}
        self._forming: dict[Hashable, _Forming[Member]] = {}  # insertion order: arrival order

    def busy(self, deployment_id: str) -> bool:
        """Whether a request of `deployment_id` that may share a run waits to share one."""
        return 0 < self.after <= self.in_flight.get(deployment_id, 0)

    def started(self, deployment_id: str) -> None:
        """A run that formed no group (a request going alone) departs."""
        self.in_flight[deployment_id] = self.in_flight.get(deployment_id, 0) + 1

    def join(
        self, key: Hashable, deployment_id: str, member: Member, items: int, size: int, room: Room
    ) -> list[list[Member]]:
        """`member` joins its key's group; the groups that depart now (each counted in flight):
        the forming one when `member` would not fit in it, and the new one once it is full."""
        departing: list[list[Member]] = []
        forming = self._forming.get(key)
        if forming is not None and not forming.fits(items, size, room):
            departing.append(self._depart(key))
            forming = None
        if forming is None:
            forming = self._forming[key] = _Forming(deployment_id)
        forming.add(member, items, size)
        if forming.items >= room.items or forming.bytes >= room.bytes:
            departing.append(self._depart(key))
        return departing

    def leave(self, key: Hashable, member: Member) -> bool:
        """`member` leaves its forming group (its client went away); False if it had departed."""
        forming = self._forming.get(key)
        if forming is None or member not in forming.members:
            return False
        index = forming.members.index(member)
        del forming.members[index]
        items, size = forming.sizes.pop(index)
        forming.items -= items
        forming.bytes -= size
        if not forming.members:
            del self._forming[key]
        return True

    def finished(self, deployment_id: str) -> list[list[Member]]:
        """A run of `deployment_id` ended: the oldest group forming for it departs, if any."""
        left = self.in_flight.get(deployment_id, 0) - 1
        if left > 0:
            self.in_flight[deployment_id] = left
        else:
            self.in_flight.pop(deployment_id, None)
        if self.busy(deployment_id):
            return []
        oldest = next((k for k, f in self._forming.items() if f.deployment_id == deployment_id), None)
        return [] if oldest is None else [self._depart(oldest)]

    def _depart(self, key: Hashable) -> list[Member]:
        forming = self._forming.pop(key)
        self.started(forming.deployment_id)
        return forming.members
