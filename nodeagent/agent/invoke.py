"""Serving invokes: core NATS request-reply on `mf.invoke.<node>.<deployment>`, one queue group per
deployment so replicas share the load. Each payload goes on to the deployment's worker process and
its result straight to the request's reply inbox; neither is stored, nor ever logged. The gateway
owns the deadline and any retry: a request already past its deadline is answered REQUEST_TIMEOUT
without running.

A reply published just before the agent's NATS connection drops may have gone into the lost
server's socket, and the gateway would wait for it until its deadline. So each reply is kept (in
memory, never on disk) for a short window, and those of the window before a drop are published
again once the connection is back (`resend_on_drop`); a gateway ignores a second copy.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Coroutine
from typing import Any

import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import Error as NatsError
from nats.errors import MaxPayloadError
from opentelemetry.trace import SpanKind

from eventstore.connection import Connection
from nodeagent.agent.metrics import AgentMetrics
from nodeagent.agent.residency import Residency
from streams import codes, subjects
from streams.codes import ServingError
from streams.messages import InvokeReply, InvokeRequest
from streams.tracing import continued

log = logging.getLogger("modelforge.agent.invoke")

_request_decoder = msgspec.json.Decoder(InvokeRequest)
_reply_encoder = msgspec.json.Encoder()
# How long a published reply is kept to be sent again should the connection drop: its loss shows
# within milliseconds of the server's (the socket is reset), and a busy machine can be slow to see it.
RESEND_WINDOW_S = 2.0


def now_unix_ms() -> int:
    return time.time_ns() // 1_000_000


def failure(code: str, message: str) -> InvokeReply:
    return InvokeReply(ok=False, code=code, message=message)


async def answer(residency: Residency, request: InvokeRequest) -> InvokeReply:
    """The reply to one decoded request: the contract output, or a failure with a stable code."""
    remaining_s = (request.deadline_unix_ms - now_unix_ms()) / 1000
    if remaining_s <= 0:
        return failure(codes.REQUEST_TIMEOUT.code, "the request's deadline passed before it ran")
    if request.deployment_id != residency.deployment_id:
        return failure(codes.RESIDENCY_CONFLICT.code, "the request names another deployment")
    if request.capability != residency.capability:
        return failure(codes.CAPABILITY_UNAVAILABLE.code, f"this deployment serves {residency.capability}")
    try:
        async with asyncio.timeout(remaining_s):  # the worker keeps the deadline too, and cancels
            served = await residency.worker.invoke(bytes(request.payload), remaining_s, request.input_type)
    except TimeoutError:
        return failure(codes.REQUEST_TIMEOUT.code, "the worker did not finish before the deadline")
    except ServingError as error:
        return failure(error.code, error.message)
    return InvokeReply(ok=True, result=msgspec.Raw(served.body), timings=served.timings)


class InvokeServer:
    """The invoke subscriptions of every residency this agent serves."""

    def __init__(
        self,
        client: Client,
        node_id: str,
        metrics: AgentMetrics | None = None,
        resend_window_s: float = RESEND_WINDOW_S,
    ) -> None:
        self.client = client
        self.node_id = node_id
        self.metrics = metrics or AgentMetrics()
        self.resend_window_s = resend_window_s
        self._subscriptions: dict[str, Subscription] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._sent: deque[tuple[float, str, bytes]] = deque()  # (when, inbox, reply) within the window

    def resend_on_drop(self, connection: Connection) -> None:
        """Publish the replies of the window before each drop of `connection` again (nats-py holds
        them until it is connected to another server)."""

        def dropped() -> None:
            connection.watch_drop(f"invoke-replies-{self.node_id}", dropped)  # and the next drop
            self._forget_old()
            if self._sent:
                log.info("connection dropped: sending the last %d invoke replies again", len(self._sent))
                self._spawn(self._resend(list(self._sent)))

        connection.watch_drop(f"invoke-replies-{self.node_id}", dropped)

    async def _resend(self, sent: list[tuple[float, str, bytes]]) -> None:
        for _, inbox, reply in sent:
            with contextlib.suppress(NatsError):  # closing: nobody is waiting any more
                await self.client.publish(inbox, reply)

    def _note_sent(self, inbox: str, reply: bytes) -> None:
        self._sent.append((time.monotonic(), inbox, reply))
        self._forget_old()

    def _forget_old(self) -> None:
        oldest = time.monotonic() - self.resend_window_s
        while self._sent and self._sent[0][0] < oldest:
            self._sent.popleft()

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def serving(self, deployment_id: str) -> bool:
        return deployment_id in self._subscriptions

    async def start(self, residency: Residency) -> None:
        deployment = residency.deployment_id
        if deployment in self._subscriptions:
            return

        async def on_request(msg: Msg) -> None:
            # Return at once so the next request can join the same batch; count it in flight now,
            # so a drain that starts before the task runs still waits for it.
            residency.started()
            self._spawn(self._handle(residency, msg))

        self._subscriptions[deployment] = await self.client.subscribe(
            subjects.invoke_subject(self.node_id, deployment),
            queue=f"dep-{deployment}",
            cb=on_request,
            pending_msgs_limit=-1,
            pending_bytes_limit=-1,
        )
        await self.client.flush()  # the interest is live before anyone is told the model is loaded

    async def stop(self, residency: Residency) -> None:
        """Take no new invokes for this residency, then wait for its in-flight ones to reply."""
        await self.stop_taking(residency.deployment_id)
        await residency.idle.wait()

    async def stop_taking(self, deployment_id: str) -> None:
        """Take no new invokes for this deployment (those delivered are still answered)."""
        subscription = self._subscriptions.pop(deployment_id, None)
        if subscription is not None:
            await _stop_taking(subscription)

    async def close(self) -> None:
        for subscription in self._subscriptions.values():
            await _stop_taking(subscription)
        self._subscriptions.clear()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _handle(self, residency: Residency, msg: Msg) -> None:
        if not msg.reply:
            residency.finished()
            return  # a publish without an inbox has nobody to answer
        arrived = time.perf_counter()
        code = codes.INTERNAL_ERROR.code  # until the reply is made
        attributes = {"modelforge.deployment_id": residency.deployment_id, "modelforge.node_id": self.node_id}
        try:
            # A span of the gateway's trace, whose context came in the message's headers.
            with continued("agent.invoke", msg.headers, SpanKind.SERVER, attributes) as span:
                try:
                    request = _request_decoder.decode(msg.data)
                except (msgspec.ValidationError, msgspec.DecodeError):
                    outcome = failure(codes.INVALID_INPUT.code, "not an InvokeRequest")
                else:
                    span.set_attribute("modelforge.request_id", request.request_id)
                    outcome = await answer(residency, request)
                code = outcome.code or "OK"
                span.set_attribute("modelforge.code", code)
                reply = _reply_encoder.encode(outcome)
                try:
                    await self.client.publish(msg.reply, reply)
                    self._note_sent(msg.reply, reply)
                except MaxPayloadError:  # the caller must hear why, not wait out its deadline
                    limit = self.client.max_payload
                    too_large = f"the result ({len(reply)} bytes) is larger than NATS carries ({limit}): send fewer items"
                    code = codes.PAYLOAD_TOO_LARGE.code
                    refusal = failure(code, too_large)
                    await self.client.publish(msg.reply, _reply_encoder.encode(refusal))
        except Exception:
            log.exception("could not answer an invoke on %s", residency.deployment_id)
        finally:
            residency.finished()
            self.metrics.invoked(residency.capability, code, time.perf_counter() - arrived)


async def _stop_taking(subscription: Subscription) -> None:
    """Take no new invokes, but answer those already delivered: a plain unsubscribe drops the
    messages nats-py holds, and their callers would wait out their deadlines."""
    try:
        await subscription.drain()  # type: ignore[no-untyped-call]  # (nats-py leaves it unannotated)
    except NatsError:  # the connection is closing: nothing can be answered any more
        with contextlib.suppress(NatsError):
            await subscription.unsubscribe()
