"""Request-reply on the hot path: one wildcard inbox per connection, a future per request.

`Client.request` in nats-py draws random bytes from the OS for every inbox and wraps each wait
in `asyncio.wait_for`; a served request makes eight such round trips, so that overhead showed up
as a third of the gateway's NATS cost. Here an inbox is a counter on one subscription, the timeout
is one timer handle, and `send` lets a caller put several requests on the wire before it waits for
any reply (an atomic batch's opening and commit travel in one flush).

Semantics match `Client.request`: a reply is a `Msg`; no subscriber raises `NoRespondersError`;
no reply within the timeout raises nats' `TimeoutError`.
"""

from __future__ import annotations

import asyncio
import itertools
import weakref
from collections.abc import Awaitable, Callable
from typing import TypeVar

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.errors import NoStreamResponseError, ServiceUnavailableError

_NO_RESPONDERS = "503"
# nats-py's three names for "no stream answered" (no responders: a stream electing its leader)
NO_LEADER = (NoRespondersError, NoStreamResponseError, ServiceUnavailableError)
NO_LEADER_PAUSE_S, MAX_NO_LEADER_PAUSE_S = 0.05, 1.0
T = TypeVar("T")


class ReplyInbox:
    """Every request of one client whose reply comes back to `<inbox>.<n>`."""

    def __init__(self, client: Client) -> None:
        self._client = client
        self._prefix = client.new_inbox()
        self._numbers = itertools.count()
        self._waiting: dict[str, asyncio.Future[Msg]] = {}
        self._subscribing: asyncio.Future[Subscription] | None = None

    async def send(
        self, subject: str, payload: bytes, timeout: float, headers: dict[str, str] | None = None
    ) -> asyncio.Future[Msg]:
        """Publish a request now; the returned future gives its reply (await it with `reply`)."""
        subscribing = self._subscribing
        if subscribing is None:
            subscribing = self._subscribing = asyncio.ensure_future(self._subscribe())
        if not subscribing.done() or subscribing.exception() is not None:
            try:
                await asyncio.shield(subscribing)
            except Exception:
                self._subscribing = None  # the next request subscribes again
                raise
        inbox = f"{self._prefix}.{next(self._numbers)}"
        loop = asyncio.get_running_loop()
        reply: asyncio.Future[Msg] = loop.create_future()
        self._waiting[inbox] = reply
        timer = loop.call_later(timeout, _expire, reply)

        def forget(_: asyncio.Future[Msg]) -> None:
            timer.cancel()
            self._waiting.pop(inbox, None)

        reply.add_done_callback(forget)
        try:
            await self._client.publish(subject, payload, reply=inbox, headers=headers)
        except BaseException:
            reply.cancel()
            raise
        return reply

    async def request(
        self, subject: str, payload: bytes, timeout: float, headers: dict[str, str] | None = None
    ) -> Msg:
        return await reply(await self.send(subject, payload, timeout, headers))

    async def _subscribe(self) -> Subscription:
        # (no reply can come before a request is sent, which waits for this)
        return await handed_over(self._client, f"{self._prefix}.*", self._answer)

    def _answer(self, msg: Msg) -> None:
        waiting = self._waiting.get(msg.subject)
        if waiting is not None and not waiting.done():
            waiting.set_result(msg)


async def handed_over(client: Client, subject: str, answer: Callable[[Msg], None]) -> Subscription:
    """A subscription whose every message nats-py's reader hands to `answer` as it reads it: no
    callback task of the subscription's own, no queue (`_HandedOver`), no pending limits."""
    sub = await client.subscribe(subject, pending_msgs_limit=-1, pending_bytes_limit=-1)
    sub._pending_queue = _HandedOver(sub, answer)  # type: ignore[assignment]
    return sub


class _HandedOver:
    """In place of the inbox subscription's pending queue: nats-py's reader, which would queue each
    reply for a task to take and pass on (the subscription's callback task, or an iterator), hands
    it to the waiting future there and then. The queue and that task's wake-up were a step of the
    event loop for each reply, three a served request (an invoke's reply and two acknowledgements).
    What else reads the queue finds it empty: pending counts, `unsubscribe`, `drain`."""

    def __init__(self, sub: Subscription, answer: Callable[[Msg], None]) -> None:
        self._sub, self._answer = sub, answer

    def put_nowait(self, msg: Msg) -> None:
        self._sub._pending_size -= len(msg.data)  # (nats-py counted it in as queued)
        self._answer(msg)

    def qsize(self) -> int:
        return 0

    def empty(self) -> bool:
        return True

    def task_done(self) -> None:
        pass

    async def join(self) -> None:
        pass


async def reply(pending: asyncio.Future[Msg]) -> Msg:
    msg = await pending
    if no_responders(msg):
        raise NoRespondersError
    return msg


def no_responders(msg: Msg) -> bool:
    """The server's answer that nothing took the request (for a publish: no stream stored it)."""
    return msg.headers is not None and msg.headers.get("Status") == _NO_RESPONDERS and not msg.data


def _expire(pending: asyncio.Future[Msg]) -> None:
    if not pending.done():
        pending.set_exception(NatsTimeoutError())


_inboxes: weakref.WeakKeyDictionary[Client, ReplyInbox] = weakref.WeakKeyDictionary()


def inbox_of(client: Client) -> ReplyInbox:
    """The client's reply inbox (one per client, made on first use)."""
    inbox = _inboxes.get(client)
    if inbox is None:
        inbox = _inboxes[client] = ReplyInbox(client)
    return inbox


async def resend_while_leaderless(send: Callable[[], Awaitable[T]], within_s: float) -> T:
    """`send()`, again while nothing answers it (no responders, under any of nats-py's three names
    for it), for up to `within_s`.

    A publish to a stream that no server answers was not stored: in a cluster, the stream is
    electing a new leader after the server that led it left, which takes a few seconds (and a new
    cluster's JetStream API has no responder until its meta leader is elected). Nothing
    tells a client when that is done, so the resends back off from 50 ms, doubling to 1 s. Past
    `within_s` the last such error is raised."""
    loop = asyncio.get_running_loop()
    give_up, pause = loop.time() + within_s, NO_LEADER_PAUSE_S
    while True:
        try:
            return await send()
        except NO_LEADER:
            remaining = give_up - loop.time()
            if remaining <= 0:
                raise
            await asyncio.sleep(min(pause, remaining))
            pause = min(2 * pause, MAX_NO_LEADER_PAUSE_S)
