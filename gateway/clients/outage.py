"""Whether a limit stream has no leader, as this replica last found, and the probe that notices
its return.

A limit message that meets no responders was not stored: its stream is electing a leader (on a
cluster, after the server that led it died). `StreamOutage.failed` then marks the stream
leaderless for the whole replica, so later requests do not each send a message and wait: they
admit from the replica's share (`gateway.clients.shares`) at once, and so do the requests whose
message to the stream is still unanswered (sent to a leader that died with it: they would wait for
their timeout; what of them did land errs on the safe side, see `gateway.clients.degraded`). The
mark is cleared by the next
message the stream answers (`answered`): a request's own, or the probe's, which sends the stream's
ordinary message (`probe`, given by `gateway.clients.limit_streams`) on a timer, backing off from
50 ms to 1 s, until one is answered. Each change is logged and counted.

The degraded mode is bounded: past `DEGRADED_MOST_S` of one outage (longer than any election: a
stream that never answers was deleted or never made, not electing), the share is no longer used and
requests wait for the stream and are refused as before; the probe goes on, and its answer ends it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final

from prometheus_client import CollectorRegistry, Counter, Gauge

from eventstore.replies import MAX_NO_LEADER_PAUSE_S, NO_LEADER_PAUSE_S

log = logging.getLogger("modelforge.gateway.limits")

DEGRADED_MOST_S: Final = 20.0  # nats-server elects within 4–9 s; its clients reconnect meanwhile


class Leaderless(Exception):
    """A client's limit message met no responders, or its stream was found leaderless meanwhile."""


class LimitMetrics:
    """The limits' own Prometheus families (a registry the replica's `/metrics` adds)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.leaderless = Gauge(
            "modelforge_limit_stream_leaderless",
            "1 while this replica finds the limit stream without a leader (admitting from shares)",
            ["stream"],
            registry=self.registry,
        )
        self.outages = Counter(
            "modelforge_limit_stream_outages",
            "Times this replica found the limit stream without a leader",
            ["stream"],
            registry=self.registry,
        )
        self.local = Counter(
            "modelforge_limit_local_admissions",
            "Requests admitted from this replica's share of a limit, with no message",
            ["limit"],
            registry=self.registry,
        )
        self.reconciled = Counter(
            "modelforge_limit_reconciled_units",
            "Rate units admitted from shares, published to the shared counter once it answered",
            registry=self.registry,
        )


class StreamOutage:
    def __init__(
        self,
        stream: str,
        metrics: LimitMetrics,
        probe: Callable[[str], Awaitable[None]],
        clock: Callable[[], float],
    ) -> None:
        self.stream, self._metrics, self._probe, self._clock = stream, metrics, probe, clock
        self.since: float | None = None  # loop time the stream was found leaderless; None: it answers
        self.back: list[Callable[[], None]] = []  # called when the stream answers again
        self.waiting: set[asyncio.Future[Any]] = set()  # replies a found outage ends (`Leaderless`)
        self._subject = ""  # the failed message's subject, which the probe sends to
        self._pause = NO_LEADER_PAUSE_S
        self._timer: asyncio.TimerHandle | None = None
        self._probing: asyncio.Task[None] | None = None

    def degraded(self) -> bool:
        """Whether requests admit from their shares (leaderless, and not for too long)."""
        return self.since is not None and self._clock() - self.since < DEGRADED_MOST_S

    def failed(self, subject: str) -> None:
        """A message to `subject` met no responders."""
        self._subject = subject
        for pending in self.waiting:
            if not pending.done():
                pending.set_exception(Leaderless(self.stream))
        self.waiting.clear()
        if self.since is not None:
            return
        self.since, self._pause = self._clock(), NO_LEADER_PAUSE_S
        log.warning("limit stream %s has no leader: admitting from this replica's shares", self.stream)
        self._metrics.outages.labels(self.stream).inc()
        self._metrics.leaderless.labels(self.stream).set(1)
        self._schedule()

    def answered(self) -> None:
        """The stream answered a message: it has a leader."""
        if self.since is None:
            return
        took = self._clock() - self.since
        self.since = None
        if self._timer is not None:
            self._timer.cancel()
        log.warning("limit stream %s answers again after %.1f s: shares no longer used", self.stream, took)
        self._metrics.leaderless.labels(self.stream).set(0)
        for callback in self.back:
            callback()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._probing is not None:
            self._probing.cancel()

    def _schedule(self) -> None:
        self._timer = asyncio.get_running_loop().call_later(self._pause, self._start_probe)
        self._pause = min(2 * self._pause, MAX_NO_LEADER_PAUSE_S)

    def _start_probe(self) -> None:
        if self.since is not None and (self._probing is None or self._probing.done()):
            self._probing = asyncio.get_running_loop().create_task(self._probe_once())

    async def _probe_once(self) -> None:
        with contextlib.suppress(Exception):  # no responders, a timeout: still out; try again
            await self._probe(self._subject)
        if self.since is not None:
            self._schedule()
