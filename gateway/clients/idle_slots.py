"""Concurrency slots a replica keeps a moment after their requests end, for its next requests.

Taking a client's slot is a publish and letting it go a delete (`gateway.clients.limits`): two
messages and two acknowledgements a request. While a client is far from its concurrency (this
replica holds at most half of its slots), a slot its request let go stays held here for `IDLE_S`,
and this replica's next request of the client takes it without a message; a slot nobody took by
then is let go as before. The limit still holds across replicas: a kept slot is still its stored
message, so no other replica can take it, and this replica hands it to one request at a time, so
at most `max_concurrency` requests hold slots, whichever replicas they run on. What a kept slot
costs is on the safe side: for up to `IDLE_S` other replicas see it taken.

Only a slot renewed within its half-life is kept (a permit hands it on with its renewal due at
the same time as before), so a kept slot's message never outlives its TTL unrenewed. A closing
replica lets every kept slot go; one that crashes leaves them to their TTL, as it does the slots
its requests held.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Final

import msgspec

IDLE_S: Final = 1.0


class Kept(msgspec.Struct):
    slot: int
    sequence: int  # the stored message's sequence (its deletion names it)
    renewed_at: float  # loop time of the message's last publish


class IdleSlots:
    """Per group of slots, those kept; each let go by `let_go` once kept `idle_s` untaken."""

    def __init__(
        self, let_go: Callable[[str, Kept], Coroutine[Any, Any, None]], idle_s: float = IDLE_S
    ) -> None:
        self._let_go, self._idle_s = let_go, idle_s
        self._kept: dict[str, dict[int, tuple[Kept, asyncio.TimerHandle]]] = {}
        self._letting_go: set[asyncio.Task[None]] = set()

    def keep(self, group: str, kept: Kept) -> None:
        timer = asyncio.get_running_loop().call_later(self._idle_s, self._expire, group, kept.slot)
        self._kept.setdefault(group, {})[kept.slot] = (kept, timer)

    def count(self, group: str) -> int:
        return len(self._kept.get(group, ()))

    def take(self, group: str) -> Kept | None:
        """The slot of `group` kept longest, no longer kept; None when none is."""
        kept = self._kept.get(group)
        if not kept:
            return None
        slot = next(iter(kept))
        taken, timer = kept.pop(slot)
        timer.cancel()
        return taken

    async def close(self) -> None:
        """Let every kept slot go now, and wait for those being let go."""
        for group, kept in self._kept.items():
            for slot in list(kept):
                self._expire(group, slot)
        self._kept.clear()
        await asyncio.gather(*self._letting_go)

    def _expire(self, group: str, slot: int) -> None:
        kept, timer = self._kept[group].pop(slot)
        timer.cancel()
        task = asyncio.get_running_loop().create_task(self._let_go(group, kept))
        self._letting_go.add(task)
        task.add_done_callback(self._letting_go.discard)
