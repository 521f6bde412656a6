"""The wire of the client-limit streams (`MF_LIMITS_RATE`, `MF_LIMITS_CONC`): creating them, and the
few requests `gateway.clients.limits` makes of them: one limit message (sent again while its stream
elects a leader), a rate window's counter, the slots of a group that are taken, and deleting a slot.

On a cluster, a limit stream whose leader's server left answers nothing until the others elect a
new one (seconds). A client's limit message (`degradable`) is sent once: no responders marks its
stream leaderless for the replica (`gateway.clients.outage`) and raises `Leaderless`, and the
limiter admits from its share (`gateway.clients.degraded`) until the stream answers again. Other
messages (a deployment's slots, renewals) are sent again, backing off, for up to
`LEADERLESS_WAIT_S` (`eventstore.replies.resend_while_leaderless`, as the event store does;
`LimitStreams.publish` says why a resend never admits more than the limits), as are a client's
while its stream has been leaderless for longer than an election takes.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Final

import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

from eventstore.provision import ensure_streams
from eventstore.replies import inbox_of, reply, resend_while_leaderless
from gateway.clients.outage import Leaderless, LimitMetrics, StreamOutage
from streams import configs, subjects
from streams.codes import ServingError

# A limit stream without a leader (an election on a cluster, seconds) holds a request this long
# before it is refused AUTH_BACKEND_UNAVAILABLE.
LEADERLESS_WAIT_S: Final = 10.0
# The probe's message to a concurrency stream: expects a sequence no slot ever has, so it is refused
# (wrong last sequence) by a stream with a leader and stores nothing.
NEVER_SEQUENCE: Final = str(2**64 - 1)


class ApiError(msgspec.Struct):
    code: int = 0
    err_code: int = 0
    description: str = ""


class Ack(msgspec.Struct):
    seq: int = 0
    val: str = ""
    error: ApiError | None = None


class _State(msgspec.Struct):
    subjects: dict[str, int] = {}


class _Info(msgspec.Struct):
    state: _State | None = None
    error: ApiError | None = None


_ack = msgspec.json.Decoder(Ack)
_info = msgspec.json.Decoder(_Info)


async def provision_limits(client: Client, replicas: int | None = None) -> list[str]:
    """Create or update the limit streams; idempotent, safe from every replica."""
    return await ensure_streams(client, configs.limit_streams, replicas)


def unavailable(exc: BaseException) -> ServingError:
    return ServingError("AUTH_BACKEND_UNAVAILABLE", f"client limits could not be checked: {exc!r}")


class LimitStreams:
    """The limit streams as one gateway process's connection reaches them."""

    def __init__(self, client: Client, timeout_s: float) -> None:
        self._nats, self._timeout = client, timeout_s
        self.metrics = LimitMetrics()
        self.rate = StreamOutage(subjects.LIMITS_RATE_STREAM, self.metrics, self._probe_rate, time.monotonic)
        self.slots = StreamOutage(
            subjects.LIMITS_CONCURRENCY_STREAM, self.metrics, self._probe_slots, time.monotonic
        )

    def outage(self, subject: str) -> StreamOutage:
        return self.rate if subject.startswith(subjects.LIMIT_RATE_PREFIX + ".") else self.slots

    async def publish(self, subject: str, headers: dict[str, str], degradable: bool = False) -> Ack:
        """One limit message, sent again for up to LEADERLESS_WAIT_S while its stream has no leader
        or leaves it unanswered (a leader lost mid-way). A resent count or slot whose first copy
        did land errs on the safe side: the count is one too high for this window, or the slot
        stays taken until its TTL; neither admits more than the limits.

        `degradable` (a client's limits, which have shares): raise `Leaderless` at once, without a
        message, while the stream is known leaderless, and when this message meets no responders or
        is still unanswered when another finds the stream leaderless."""
        outage, loop = self.outage(subject), asyncio.get_running_loop()
        if degradable and outage.degraded():
            raise Leaderless(outage.stream)
        once = degradable and outage.since is None
        give_up = loop.time() + LEADERLESS_WAIT_S
        while True:
            try:
                if once:
                    answer = await self._send(subject, headers, abandonable=True)
                else:
                    answer = await resend_while_leaderless(
                        lambda: self._send(subject, headers), give_up - loop.time()
                    )
            except NoRespondersError as exc:
                if once:
                    raise Leaderless(outage.stream) from exc
                raise
            except NatsTimeoutError:
                if loop.time() >= give_up:
                    raise
                continue
            return _ack.decode(answer.data)

    async def _send(self, subject: str, headers: dict[str, str], abandonable: bool = False) -> Msg:
        """One limit message; its stream's outage learns whether it was answered, and (`abandonable`)
        ends the wait with `Leaderless` if it finds the stream leaderless meanwhile."""
        outage = self.outage(subject)
        pending = await inbox_of(self._nats).send(subject, b"", self._timeout, headers)
        if abandonable:
            outage.waiting.add(pending)
        try:
            answer = await reply(pending)
        except NoRespondersError:
            outage.failed(subject)
            raise
        finally:
            outage.waiting.discard(pending)
        outage.answered()
        return answer

    async def _probe_rate(self, subject: str) -> None:
        await self._send(subject, {"Nats-Incr": "+0"})

    async def _probe_slots(self, subject: str) -> None:
        await self._send(subject, {"Nats-Expected-Last-Subject-Sequence": NEVER_SEQUENCE})

    def close(self) -> None:
        self.rate.close()
        self.slots.close()

    async def increment(self, subject: str, units: int, degradable: bool = False) -> int:
        """Add `units` (negative: give back) to a rate window's count; its total after."""
        ack = await self.publish(subject, {"Nats-Incr": f"{units:+d}"}, degradable)
        if ack.error is not None:
            raise unavailable(RuntimeError(ack.error.description))
        return int(ack.val)

    async def occupied(self, group: str) -> dict[str, int]:
        """The taken slots of `group`: slot subject -> its message count."""
        request = msgspec.json.encode({"subjects_filter": subjects.slots_filter(group)})
        api = f"$JS.API.STREAM.INFO.{subjects.LIMITS_CONCURRENCY_STREAM}"
        reply = _info.decode((await inbox_of(self._nats).request(api, request, self._timeout)).data)
        if reply.error is not None:
            raise unavailable(RuntimeError(reply.error.description))
        return reply.state.subjects if reply.state is not None else {}

    async def delete(self, sequence: int) -> None:
        """Delete a slot's message (its sequence), which frees the slot for every replica."""
        request = msgspec.json.encode({"seq": sequence, "no_erase": True})
        api = f"$JS.API.STREAM.MSG.DELETE.{subjects.LIMITS_CONCURRENCY_STREAM}"
        await inbox_of(self._nats).request(api, request, self._timeout)

    async def announce_freed(self, group: str) -> None:
        """Tell those waiting for a slot of `group`, on any replica, to try again (best effort)."""
        with contextlib.suppress(Exception):
            await self._nats.publish(subjects.slot_freed_subject(group), b"")
