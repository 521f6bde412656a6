"""Acceptances held a moment before they are recorded.

Every accepted request has its acceptance in MF_REQUESTS once: as a `RequestAccepted` of its own,
or carried by its end event (`RequestCompleted.accepted`, `RequestFailed.accepted`). A replica holds
each acceptance for `hold_s` before recording it; a request that ends sooner (a warm request at
one client: a few milliseconds) is then one message, not two: one fewer for the gateway to build
and read the acknowledgement of, for nats-server to store and for the projector to fold
(docs/performance.md, "One message for a request that ends at once"). A gateway killed outright
loses the acceptances it holds, as it loses the records its connection holds for as long
(`OrderedFlushClient.held_for_s`); a read that must find this replica's requests has what is held
recorded first (`ServingContext.records_written`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable

ACCEPTANCE_HOLD_S = 0.025  # as long as the connection holds a record (`OrderedFlushClient.held_for_s`)


class HeldAcceptances:
    """Acceptances not yet recorded, each recorded about `hold_s` after it was held unless `take`n
    first. One timer serves them all: where it fires it records every acceptance due within half
    a hold more, so each is held between half a hold and a hold, and one wake-up records several
    under load (a timer per request measured 5 % more of the gateway's CPU at 64 clients)."""

    def __init__(self, hold_s: float = ACCEPTANCE_HOLD_S) -> None:
        self.hold_s = hold_s
        self._held: dict[Hashable, tuple[float, Callable[[], None]]] = {}  # in the order held
        self._timer: asyncio.TimerHandle | None = None

    def __len__(self) -> int:
        return len(self._held)

    def hold(self, request: Hashable, record: Callable[[], None]) -> None:
        """`record()` the request's acceptance `hold_s` from now (at once where that is 0)."""
        if self.hold_s <= 0:
            record()
            return
        loop = asyncio.get_running_loop()
        self._held[request] = (loop.time() + self.hold_s, record)
        if self._timer is None:
            self._timer = loop.call_later(self.hold_s, self._record_due)

    def take(self, request: Hashable) -> bool:
        """Whether the request's acceptance was still held, and so is not recorded: its end event
        carries it."""
        return self._held.pop(request, None) is not None

    def record_all(self) -> None:
        """Record every acceptance held, now."""
        held, self._held = self._held, {}
        for _, record in held.values():
            record()

    def _record_due(self) -> None:
        self._timer = None
        loop = asyncio.get_running_loop()
        until = loop.time() + self.hold_s / 2
        while self._held:
            request, (due, record) = next(iter(self._held.items()))
            if due > until:
                self._timer = loop.call_at(due, self._record_due)
                return
            del self._held[request]
            record()
