"""Which artifact sets a node keeps in its cache: pure bookkeeping of sizes and last uses.

The cache holds at most its budget of bytes. Room for a set is made by evicting the least recently
used sets first, never one a worker holds (its files back a loaded model); a set that cannot fit,
alone or beside the held ones, is refused with ARTIFACT_SET_EXCEEDS_CACHE.
"""

from __future__ import annotations

from dataclasses import dataclass

from streams import codes
from streams.codes import ServingError


@dataclass(frozen=True)
class CachedSet:
    set_id: str
    size_bytes: int
    last_used: int  # a tick of these books: larger is more recent


class CacheBooks:
    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self._sets: dict[str, CachedSet] = {}
        self._tick = 0

    def __contains__(self, set_id: str) -> bool:
        return set_id in self._sets

    @property
    def used_bytes(self) -> int:
        return sum(s.size_bytes for s in self._sets.values())

    def set_ids(self) -> list[str]:
        return sorted(self._sets)

    def add(self, set_id: str, size_bytes: int) -> None:
        """Record `set_id` as cached and used now (replacing what was known of it)."""
        self._tick += 1
        self._sets[set_id] = CachedSet(set_id, size_bytes, self._tick)

    def touch(self, set_id: str) -> None:
        self.add(set_id, self._sets[set_id].size_bytes)

    def remove(self, set_id: str) -> None:
        self._sets.pop(set_id, None)

    def make_room(self, set_id: str, size_bytes: int, held: frozenset[str]) -> list[str]:
        """The sets to evict, least recently used first, so `size_bytes` of `set_id` fit the budget;
        changes nothing. Raises ARTIFACT_SET_EXCEEDS_CACHE where no eviction makes it fit."""
        if size_bytes > self.budget_bytes:
            raise _exceeds(f"{set_id} is {size_bytes} bytes; the cache budget is {self.budget_bytes} bytes")
        others = [s for s in self._sets.values() if s.set_id != set_id]
        free = self.budget_bytes - sum(s.size_bytes for s in others)
        evictable = sorted((s for s in others if s.set_id not in held), key=lambda s: s.last_used)
        evicted: list[str] = []
        for candidate in evictable:
            if free >= size_bytes:
                break
            evicted.append(candidate.set_id)
            free += candidate.size_bytes
        if free < size_bytes:
            raise _exceeds(
                f"{set_id} is {size_bytes} bytes; the sets loaded workers hold leave {free} of the "
                f"cache budget's {self.budget_bytes} bytes"
            )
        return evicted


def _exceeds(detail: str) -> ServingError:
    return ServingError(codes.ARTIFACT_SET_EXCEEDS_CACHE.code, detail)
