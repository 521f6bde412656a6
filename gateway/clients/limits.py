"""`RequestLimiter`: a client's requests-per-minute and concurrency, exact across gateway replicas.

The shared state lives in JetStream itself (no extra service), in two memory streams that
`gateway.clients.limit_streams.provision_limits` creates (configs in `streams.configs`):

* **rate** — `MF_LIMITS_RATE`, a distributed-counter stream (nats-server ≥ 2.12). Each request
  publishes `Nats-Incr: +1` to `mf.limit.rate.<client>.<epoch minute>`; the server adds atomically
  and the ack carries the new total `n`. The request is admitted iff `n <= rpm`. One round trip,
  never a conflict or retry, whatever the number of replicas. A refused request (over the rate,
  or admitted by the rate but refused a concurrency slot) gives its unit back with `-1`, so the
  counter is always "admitted + in flight" and refusals never eat into the next admissions.
  A client far from its rate is counted in blocks (`+16`, `gateway.clients.rate_blocks`, which
  says why the limit still holds): the block's other units go to this replica's next requests of
  the window without a message, and the counter also holds the units replicas counted unused.
  Windows are fixed UTC minutes on the gateway's clock (replicas must run NTP; skew δ moves a
  window edge by δ). Old windows age out by the stream's max_age.
* **concurrency** — `MF_LIMITS_CONC`, per-message TTL, one message per subject. A client has
  slots `mf.limit.conc.<client>.<0..max-1>`; taking one is a publish with
  `Nats-Expected-Last-Subject-Sequence: 0`, which the server accepts for exactly one publisher
  while the slot is empty. A held slot (a `Permit`, `gateway.clients.permit`) carries `Nats-TTL`,
  renewed at half-life while held, so a crashed replica's slot frees itself; release deletes the
  message by its sequence. We first try a random slot this replica does not hold (one round trip
  when the client is not near its limit); on a conflict we list the occupied slots with one
  stream-info request and try the free ones; none free → `QUEUE_FULL`.

The two checks run concurrently, so an admitted request costs one round trip of latency (two
messages); a refused one pays one more to give back what it took. Release is one round trip.

`has_headroom` tells from this replica's latest facts (the last rate total it saw, the slots it
holds, any recent refusal or slot conflict) whether a client is far from both limits: the serving
path then runs the check alongside the capacity search instead of before it
(`gateway.clients.admission`).

The streams' wire (resends while a stream elects a leader) is `gateway.clients.limit_streams`.
While a stream has no leader (an election on a cluster) a client's requests are admitted from this
replica's share of each limit, with no message (`gateway.clients.degraded`, `gateway.clients.shares`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, Final, TypeVar

from nats.aio.client import Client

from eventstore.errors import WRONG_LAST_SEQUENCE_CODES
from gateway.clients.idle_slots import IdleSlots, Kept
from gateway.clients.limit_streams import LimitStreams, unavailable
from gateway.clients.model import ClientPrincipal
from gateway.clients.outage import Leaderless
from gateway.clients.permit import Permit
from gateway.clients.rate_count import Counted, RateCounter
from streams import subjects
from streams.codes import ServingError

log = logging.getLogger("modelforge.gateway.limits")

WINDOW_S: Final = 60
SLOT_ROUNDS: Final = 3  # stream-info rounds before a contended client is told QUEUE_FULL


T = TypeVar("T")


async def _outcome(work: Coroutine[Any, Any, T]) -> T | BaseException:
    """What `work` returns, or the exception it raises (as `gather(return_exceptions=True)` gives)."""
    try:
        return await work
    except Exception as failed:
        return failed


def _unheld_slot(held: set[int], max_concurrency: int) -> int | None:
    """A random slot this replica does not hold; O(1) unless it holds most of them."""
    if len(held) >= max_concurrency:
        return None
    for _ in range(8):
        slot = random.randrange(max_concurrency)
        if slot not in held:
            return slot
    return random.choice([s for s in range(max_concurrency) if s not in held])


class RequestLimiter:
    """One per gateway process; each request does `async with limiter.admit(principal): ...`."""

    def __init__(
        self,
        client: Client,
        *,
        slot_ttl_s: float = 30.0,
        max_hold_s: float = 900.0,
        timeout_s: float = 2.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if slot_ttl_s < 2:
            raise ValueError("slot TTL must be at least 2 s (it is renewed at half-life)")
        self._streams = LimitStreams(client, timeout_s)
        self.slot_ttl_s = slot_ttl_s
        self.max_hold_s = max_hold_s  # renewals stop after this: longer than any request may run
        self._clock = clock
        self._held: dict[str, set[int]] = {}  # slots this replica holds, per group of slots
        self._rate = RateCounter(self._streams)  # the rate counter, as this replica counts on it
        self._crowded_until: dict[str, float] = {}  # per group: refused or contended until then
        self._sizes: dict[str, int] = {}  # per group of slots: how many there are, as last asked
        self._idle = IdleSlots(self._let_go_kept)  # client slots kept a moment for the next request
        self._shares = self._rate.shares  # admitting while a limit stream has no leader
        self.metrics = self._streams.metrics.registry

    def has_headroom(self, principal: ClientPrincipal) -> bool:
        """Whether, as far as this replica has seen, the client is under half of each limit.

        Unknown (no total seen this window or the last) counts as near: a client's first request
        per window and replica is checked first. Other replicas' traffic can make this wrong; the
        check still decides, and this replica's next facts correct the view.
        """
        now = self._clock()
        client_id, group = principal.client_id, subjects.client_slots(principal.client_id)
        if self._crowded_until.get(group, 0.0) > now:
            return False
        seen = self._rate.seen.get(client_id)
        if seen is None or seen[0] < int(now // WINDOW_S) - 1:
            return False
        if seen[1] * 2 > principal.requests_per_minute:
            return False
        in_use = len(self._held.get(group, ())) - self._idle.count(group) + self._shares.slots.in_use(group)
        return in_use * 2 < principal.max_concurrency

    def _crowded(self, group: str) -> None:
        """Check this group's holders first until the current rate window ends."""
        self._crowded_until[group] = (int(self._clock() // WINDOW_S) + 1) * WINDOW_S

    @contextlib.asynccontextmanager
    async def admit(self, principal: ClientPrincipal) -> AsyncIterator[Permit]:
        permit = await self.acquire(principal)
        try:
            yield permit
        finally:
            await permit.release()

    async def acquire(self, principal: ClientPrincipal) -> Permit:
        """Count one request and take a concurrency slot, or raise RATE_LIMITED / QUEUE_FULL (429)."""
        now = self._clock()
        window = int(now // WINDOW_S)
        group = subjects.client_slots(principal.client_id)
        crowded = self._crowded_until.get(group, 0.0) > now
        # Most requests of a busy client are counted from a block and take a kept slot, with no
        # message: then no task is made (two a request, and a loop turn each, at one client).
        counted: Counted | BaseException | None = self._rate.from_block(principal.client_id, window)
        slot: Permit | BaseException | None = self._kept_slot(group, principal.max_concurrency)
        if counted is None and slot is None:
            counted, slot = await asyncio.gather(
                self._rate.count(principal, window, crowded),
                self._take_slot(group, principal.max_concurrency, degradable=True),
                return_exceptions=True,
            )
        elif counted is None:
            counted = await _outcome(self._rate.count(principal, window, crowded))
        elif slot is None:
            slot = await _outcome(self._take_slot(group, principal.max_concurrency, degradable=True))
        permit = slot if isinstance(slot, Permit) else None
        rate_ok = isinstance(counted, tuple) and counted[0]
        if rate_ok and permit is not None:
            if not permit.local:
                permit.reusable = True
                permit._schedule_renewal()
            return permit
        self._crowded(group)
        # Refused (or a backend failure): give back whatever this attempt took, then say why.
        undo: list[Awaitable[object]] = []
        if isinstance(counted, tuple):
            undo.append(self._rate.undo(principal, window, counted))
        if permit is not None:
            undo.append(permit.release())
        if undo:
            await asyncio.gather(*undo, return_exceptions=True)
        for outcome in (counted, slot):
            if isinstance(outcome, ServingError):
                raise outcome
            if isinstance(outcome, BaseException):
                raise unavailable(outcome) from outcome
        if not rate_ok:
            retry_after = max(1, math.ceil(WINDOW_S - now % WINDOW_S))
            raise ServingError(
                "RATE_LIMITED",
                f"more than {principal.requests_per_minute} requests this minute",
                details={"retry_after_s": retry_after, "limit": principal.requests_per_minute},
            )
        raise ServingError(
            "QUEUE_FULL",
            f"{principal.max_concurrency} requests of this client are already running",
            details={"limit": principal.max_concurrency},
        )

    # ---- concurrency ----------------------------------------------------------------------------

    async def take_slot(self, group: str, size: int) -> Permit | None:
        """One of the `size` slots of `group` (`subjects.deployment_slots`, say), held and renewed
        until released; None when every one is held. The same slots and rules as a client's; its
        release is announced on `subjects.slot_freed_subject(group)` to those waiting for one."""
        permit = await self._take_slot(group, size)
        if permit is not None:
            permit.announce = True
            permit._schedule_renewal()
        return permit

    async def _take_slot(self, group: str, max_concurrency: int, degradable: bool = False) -> Permit | None:
        """A slot of `group`; `degradable` (a client's): from the replica's share, with no message,
        while the stream has no leader."""
        if (kept := self._kept_slot(group, max_concurrency)) is not None:
            return kept
        held = self._held.setdefault(group, set())
        if degradable and self._streams.slots.degraded():
            return self._local_slot(group, max_concurrency)
        if len(held) + self._shares.slots.in_use(group) >= max_concurrency:  # local ones count too
            return None
        first = _unheld_slot(held, max_concurrency)
        if first is None:
            return None
        candidates = [first]  # the cheap optimistic first try
        for _ in range(SLOT_ROUNDS + 1):
            for slot in candidates:
                try:
                    permit = await self._try_slot(group, slot, degradable)
                except Leaderless:
                    return self._local_slot(group, max_concurrency)
                if permit is not None:
                    return permit
            self._crowded(group)  # another replica holds the slot we tried
            occupied = await self._streams.occupied(group)
            candidates = [
                s
                for s in range(max_concurrency)
                if s not in held and subjects.slot_subject(group, s) not in occupied
            ]
            if not candidates:
                return None
            random.shuffle(candidates)
        return None

    def _kept_slot(self, group: str, max_concurrency: int) -> Permit | None:
        """A slot of `group` this replica kept idle, taken at once (no message), or None."""
        self._sizes[group] = max_concurrency
        kept = self._idle.take(group)
        return None if kept is None else Permit(self, group, kept.slot, kept.sequence, kept.renewed_at)

    def _local_slot(self, group: str, max_concurrency: int) -> Permit | None:
        held = len(self._held.get(group, ()))
        if not self._shares.take_slot(group, max_concurrency, held):
            return None
        permit = Permit(self, group, -1, 0)
        permit.local = True
        return permit

    async def _try_slot(self, group: str, slot: int, degradable: bool = False) -> Permit | None:
        headers = {"Nats-Expected-Last-Subject-Sequence": "0", "Nats-TTL": self._ttl()}
        held = self._held.setdefault(group, set())
        if slot in held:  # another request of this replica got there first
            return None
        held.add(slot)  # reserve locally first, so this replica never races itself for the slot
        try:
            ack = await self._streams.publish(subjects.slot_subject(group, slot), headers, degradable)
        except BaseException:
            held.discard(slot)
            raise
        if ack.error is None:
            return Permit(self, group, slot, ack.seq)
        held.discard(slot)
        if ack.error.err_code in WRONG_LAST_SEQUENCE_CODES:  # another replica took the slot
            return None
        raise unavailable(RuntimeError(ack.error.description))

    async def renew_slot(self, permit: Permit) -> bool:
        """Extend a held slot's TTL (for its `Permit`); False when it had already expired."""
        headers = {"Nats-Expected-Last-Subject-Sequence": str(permit.sequence), "Nats-TTL": self._ttl()}
        ack = await self._streams.publish(subjects.slot_subject(permit.group, permit.slot), headers)
        if ack.error is None:
            permit.sequence, permit.renewed_at = ack.seq, asyncio.get_running_loop().time()
            return True
        permit.lost = True
        log.warning("concurrency slot %s.%s expired while held", permit.group, permit.slot)
        return False

    async def release_slot(self, permit: Permit) -> None:
        """Free a held slot (for its `Permit`: call `Permit.release`, which does it once); a client's
        slot, while the client is far from its concurrency, is kept a moment for the next request
        (`gateway.clients.idle_slots`); a local slot (`gateway.clients.degraded`) only ends."""
        if permit.local:
            self._shares.slots.free(permit.group)
            return
        if self._keeps(permit):
            self._idle.keep(permit.group, Kept(permit.slot, permit.sequence, permit.renewed_at))
            return
        await self._delete_slot(permit.group, permit.slot, None if permit.lost else permit.sequence)
        if permit.announce:
            await self._streams.announce_freed(permit.group)

    def _keeps(self, permit: Permit) -> bool:
        """A client's slot (not a deployment's) renewed on time, of a client this replica holds at
        most half the slots of."""
        fresh = asyncio.get_running_loop().time() - permit.renewed_at < self.slot_ttl_s / 2
        held = len(self._held.get(permit.group, ()))
        return permit.reusable and not permit.lost and fresh and held * 2 <= self._sizes.get(permit.group, 0)

    async def _let_go_kept(self, group: str, kept: Kept) -> None:
        await self._delete_slot(group, kept.slot, kept.sequence)

    async def _delete_slot(self, group: str, slot: int, sequence: int | None) -> None:
        """Delete the slot's message (None: it expired already) and stop holding it."""
        try:
            if sequence is not None:
                await self._streams.delete(sequence)
        except Exception as exc:  # the TTL frees the slot anyway
            log.warning("releasing concurrency slot %s.%s failed: %r", group, slot, exc)
        finally:
            self._held.get(group, set()).discard(slot)

    async def close(self) -> None:
        """Let go of the slots kept for requests to come (a closing replica serves none)."""
        await self._idle.close()
        self._streams.close()
        await self._shares.close()

    def _ttl(self) -> str:
        return f"{math.ceil(self.slot_ttl_s)}s"
