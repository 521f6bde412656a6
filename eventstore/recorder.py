"""Per-request records written with no task, future or timer of their own.

A served request writes two records to MF_REQUESTS (how it was accepted and how it ended), off the
response's path. Each was a task awaiting a chain of coroutines, a future and a timeout timer for
its acknowledgement: at one client the records were ~15 % of the gateway's CPU, building them ~1 %;
written this way (still each acknowledged) the gateway spends ~5 % less (docs/performance.md,
"Request records without a task each"). Here a record is held with the connection's others at once
(`OrderedFlushClient.publish_held`), its acknowledgement is read where nats-py's reader hands it
over, and one timer a connection expires those unanswered. A record that is refused, that no stream
takes, or that goes unanswered for the publish timeout is handed to its `failed` callback, which
tries it again with the same id (the stream keeps one copy).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable

from nats.aio.msg import Msg
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

from eventstore.connection import OrderedFlushClient
from eventstore.replies import handed_over, no_responders
from eventstore.store import EventStore, Outgoing, ack_sequence

Failed = Callable[[Outgoing, Exception], None]


class _Written:
    __slots__ = ("deadline", "failed", "number", "outgoing")

    def __init__(self, number: int, outgoing: Outgoing, failed: Failed, deadline: float) -> None:
        self.number, self.outgoing, self.failed, self.deadline = number, outgoing, failed, deadline


class RequestRecorder:
    """Records of one connection, each acknowledged or handed to its `failed` callback."""

    def __init__(self, store: EventStore) -> None:
        if not isinstance(store.client, OrderedFlushClient):
            raise TypeError(
                "request records are held by an OrderedFlushClient (eventstore.connection.connect)"
            )
        self._store, self._client = store, store.client
        self._prefix = ""
        self._numbers = itertools.count()
        # by reply subject, in the order written (so the oldest is first: numbers and deadlines rise)
        self._unanswered: dict[str, _Written] = {}
        self._expiry: asyncio.TimerHandle | None = None
        self._waiting: list[tuple[int, asyncio.Future[None]]] = []  # (last number, waiter): `written`

    async def open(self) -> None:
        """Subscribe to the records' acknowledgements (before any record is written)."""
        self._prefix = self._client.new_inbox()
        await handed_over(self._client, f"{self._prefix}.*", self._answered)

    def record(self, outgoing: Outgoing, failed: Failed) -> None:
        """Hold `outgoing` to be written with the connection's other records; `failed(outgoing,
        error)` is called, once, should it not be stored."""
        if not self._prefix:
            raise RuntimeError("the recorder is not open")
        number = next(self._numbers)
        reply = f"{self._prefix}.{number}"
        try:
            self._client.publish_held(outgoing.subject, reply, outgoing.data, outgoing.headers)
        except Exception as refused:  # closed, draining, too large, the reconnect buffer full
            failed(outgoing, refused)
            return
        loop = asyncio.get_running_loop()
        written = _Written(number, outgoing, failed, loop.time() + self._store.publish_timeout)
        self._unanswered[reply] = written
        if self._expiry is None:
            self._expiry = loop.call_at(written.deadline, self._expire)

    @property
    def unanswered(self) -> int:
        return len(self._unanswered)

    async def written(self, timeout: float | None = None) -> None:
        """Wait, up to `timeout`, until every record held so far is acknowledged or handed to its
        `failed` callback (each is, within the publish timeout)."""
        if not self._unanswered:
            return
        waiting = (
            next(reversed(self._unanswered.values())).number,
            asyncio.get_running_loop().create_future(),
        )
        self._waiting.append(waiting)
        try:
            await asyncio.wait([waiting[1]], timeout=timeout)
        finally:
            if waiting in self._waiting:
                self._waiting.remove(waiting)

    def _answered(self, msg: Msg) -> None:
        written = self._unanswered.pop(msg.subject, None)
        if written is None:
            return  # expired before it came: already handed on
        try:
            if no_responders(msg):
                raise NoRespondersError
            sequence = ack_sequence(written.outgoing.subject, msg.data)
        except Exception as refused:
            written.failed(written.outgoing, refused)
        else:
            self._store.last_request_sequence = max(self._store.last_request_sequence, sequence)
        if not self._unanswered and self._expiry is not None:
            self._expiry.cancel()  # (none left to expire: no timer outlives the records)
            self._expiry = None
        if self._waiting:
            self._wake()

    def _expire(self) -> None:
        self._expiry = None
        now = asyncio.get_running_loop().time()
        while self._unanswered:
            reply, written = next(iter(self._unanswered.items()))
            if written.deadline > now:
                self._expiry = asyncio.get_running_loop().call_at(written.deadline, self._expire)
                break
            del self._unanswered[reply]
            written.failed(written.outgoing, NatsTimeoutError())
        if self._waiting:
            self._wake()

    def _wake(self) -> None:
        oldest = next(iter(self._unanswered.values())).number if self._unanswered else None
        still = []
        for last, waiter in self._waiting:
            if oldest is None or oldest > last:
                if not waiter.done():
                    waiter.set_result(None)
            else:
                still.append((last, waiter))
        self._waiting = still
