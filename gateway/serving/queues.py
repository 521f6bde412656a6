"""The global queue: requests waiting for capacity on every gateway replica together.

Each replica keeps its own line (`ServingContext.waiting`); the scheduler's `global_queue_limit`
counts all of them. A replica announces its depth on core NATS (`mf.queue.<gateway>`) whenever it
changes, and again every half validity while it is not zero; every replica adds up the others'
latest announcements that are still valid. A replica that vanished stops counting once its last
announcement lapses. Queue depth is operational state, not history: it is never an event.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import Error as NatsError

from streams import subjects
from streams.messages import QueueDepth

log = logging.getLogger("modelforge.gateway.queues")
VALIDITY_S = 5.0
_decoder = msgspec.json.Decoder(QueueDepth)


def monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


class PeerQueues:
    """The other replicas' latest announcements, each with when it lapses on this replica's
    monotonic clock. Pure: the caller says what time it is."""

    def __init__(self) -> None:
        self._latest: dict[str, tuple[int, int]] = {}  # gateway id -> (depth, lapses at, ms)

    def heard(self, announcement: QueueDepth, now_ms: int) -> None:
        # Lapsed replicas are forgotten here: a restarted replica comes back under a new id.
        self._latest = {gw: held for gw, held in self._latest.items() if held[1] >= now_ms}
        self._latest[announcement.gateway_id] = (announcement.depth, now_ms + announcement.valid_for_ms)

    def depth(self, now_ms: int) -> int:
        return sum(depth for depth, lapses in self._latest.values() if lapses >= now_ms)


class QueueBoard:
    """This replica's side of the global queue: announces its own depth, hears the others'."""

    def __init__(self, client: Client, gateway_id: str, validity_s: float = VALIDITY_S) -> None:
        self.client, self.gateway_id, self.validity_s = client, gateway_id, validity_s
        self.peers = PeerQueues()
        self._depth = 0  # this replica's line, as last told
        self._changed = asyncio.Event()
        self._subscription: Subscription | None = None
        self._announcer: asyncio.Task[None] | None = None
        self._announced = 0  # the depth last announced
        self._news = asyncio.Event()  # set (and replaced) whenever another replica's line is heard

    def changed(self, depth: int) -> None:
        """This replica's line is now `depth` long (cheap: the announcer coalesces changes)."""
        self._depth = depth
        self._changed.set()

    def peer_depth(self) -> int:
        """Requests waiting on the other replicas, as last announced and still valid."""
        return self.peers.depth(monotonic_ms())

    async def wait_for_peers(self, depth: int, timeout: float) -> bool:
        """Wait (up to `timeout` s) until the other replicas' lines add up to `depth` or more, as
        heard here; true if they do."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                while self.peer_depth() < depth:
                    await self._news.wait()
        return self.peer_depth() >= depth

    async def start(self) -> None:
        self._subscription = await self.client.subscribe(f"{subjects.QUEUE_DEPTH_PREFIX}.*", cb=self._heard)
        self._announcer = asyncio.create_task(self._announce(), name="queue-announcer")

    async def close(self) -> None:
        """Stop; a replica leaving with requests in line says its line is empty, so the others
        need not wait for its announcement to lapse."""
        if self._announcer is not None:
            self._announcer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._announcer
        if self._announced:
            with contextlib.suppress(NatsError):
                await self._publish(0)
        if self._subscription is not None:
            with contextlib.suppress(NatsError):
                await self._subscription.unsubscribe()

    async def _heard(self, msg: Msg) -> None:
        try:
            announcement = _decoder.decode(msg.data)
        except (msgspec.DecodeError, msgspec.ValidationError):
            log.warning("ignoring a malformed queue announcement on %s", msg.subject)
            return
        if announcement.gateway_id != self.gateway_id:
            self.peers.heard(announcement, monotonic_ms())
            news, self._news = self._news, asyncio.Event()
            news.set()

    async def _announce(self) -> None:
        while True:
            self._changed.clear()
            depth = self._depth
            if depth or self._announced:  # a line that emptied is announced once, then nothing is sent
                try:
                    await self._publish(depth)
                except NatsError as error:  # the next change or renewal tries again
                    log.warning("queue depth not announced: %r", error)
            renew = self.validity_s / 2 if depth else None
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(renew):
                    await self._changed.wait()

    async def _publish(self, depth: int) -> None:
        message = QueueDepth(
            gateway_id=self.gateway_id, depth=depth, valid_for_ms=int(self.validity_s * 1000)
        )
        await self.client.publish(subjects.queue_depth_subject(self.gateway_id), msgspec.json.encode(message))
        self._announced = depth
