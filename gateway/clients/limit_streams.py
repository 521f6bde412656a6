"""The wire of the client-limit streams (`MF_LIMITS_RATE`, `MF_LIMITS_CONC`): creating them, and the
few requests `gateway.clients.limits` makes of them: one limit message (sent again while its stream
elects a leader), a rate window's counter, the slots of a group that are taken, and deleting a slot.

On a cluster, a limit stream whose leader's server left answers nothing until the others elect a
new one (seconds): its messages are sent again, backing off, for up to `LEADERLESS_WAIT_S`
(`eventstore.replies.resend_while_leaderless`, as the event store does; `LimitStreams.publish` says
why a resend never admits more than the limits).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Final

import msgspec
from nats.aio.client import Client
from nats.errors import TimeoutError as NatsTimeoutError

from eventstore.provision import ensure_streams
from eventstore.replies import inbox_of, resend_while_leaderless
from streams import configs, subjects
from streams.codes import ServingError

# A limit stream without a leader (an election on a cluster, seconds) holds a request this long
# before it is refused AUTH_BACKEND_UNAVAILABLE.
LEADERLESS_WAIT_S: Final = 10.0


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

    async def publish(self, subject: str, headers: dict[str, str]) -> Ack:
        """One limit message, sent again for up to LEADERLESS_WAIT_S while its stream has no leader
        or leaves it unanswered (a leader lost mid-way). A resent count or slot whose first copy
        did land errs on the safe side: the count is one too high for this window, or the slot
        stays taken until its TTL; neither admits more than the limits."""
        inbox, loop = inbox_of(self._nats), asyncio.get_running_loop()
        give_up = loop.time() + LEADERLESS_WAIT_S
        while True:
            try:
                reply = await resend_while_leaderless(
                    lambda: inbox.request(subject, b"", self._timeout, headers), give_up - loop.time()
                )
            except NatsTimeoutError:
                if loop.time() >= give_up:
                    raise
                continue
            return _ack.decode(reply.data)

    async def increment(self, subject: str, units: int) -> int:
        """Add `units` (negative: give back) to a rate window's count; its total after."""
        ack = await self.publish(subject, {"Nats-Incr": f"{units:+d}"})
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
