"""The commit interval bounds how often a projector commits under steady traffic, never how long
the first events after a quiet spell wait (those commit after a short linger for the rest of
their request, `projections.pace.QUIET_LINGER_S`), nor how long a reader waiting for a
sequence waits (it asks for it: `projections.wanted`), nor how long traffic that rises during a
trickle's long interval waits (its readers' sockets fill: `projections.swell`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest

from eventstore.store import EventStore
from modelforge.devstack.nats_server import NatsServer
from projections.pace import EVENTS_PER_COMMIT
from projections.scenario import traffic
from projections.wait import ProjectionWaiter
from streams.subjects import REQUESTS_STREAM

from .helpers import project_until, projecting, publish

AN_HOUR_S = 3600.0


async def test_a_request_after_a_quiet_spell_is_applied_without_waiting_out_the_commit_interval(
    private_nats: NatsServer, private_store: EventStore, fresh_database: str
) -> None:
    target = await publish(private_store, traffic("quiet", 1))

    await project_until(fresh_database, private_nats.url, target, timeout=30.0, commit_interval=AN_HOUR_S)


async def test_a_reader_waiting_for_a_sequence_is_answered_without_waiting_out_the_commit_interval(
    private_nats: NatsServer, private_store: EventStore, fresh_database: str
) -> None:
    async with projecting(fresh_database, private_nats.url, commit_interval=AN_HOUR_S):
        waiter = await ProjectionWaiter.open(fresh_database)
        try:
            first = await publish(private_store, traffic("first", 1))
            assert await waiter.wait(first["MF_EVENTS"], "MF_EVENTS", timeout=30.0)
            # The first commit started the hour: these would wait it out, but for the reader's ask.
            then = await publish(private_store, traffic("then", 1))

            assert await waiter.wait(then["MF_EVENTS"], "MF_EVENTS", timeout=30.0)
            assert await waiter.wait(then["MF_REQUESTS"], "MF_REQUESTS", timeout=30.0)
        finally:
            await waiter.close()


@asynccontextmanager
async def a_burst_after_a_lone_request(
    nats_url: str, store: EventStore, database: str, commit_interval: float | None = None
) -> AsyncIterator[Callable[[], Awaitable[None]]]:
    """A projector following; one lone request applied (after a quiet spell: a trickle's rate, so
    the next commit is the longest interval away), then a commit's worth of requests published at
    once. Yields a wait for the burst to be applied, as heard from the projector (never asked)."""
    async with projecting(database, nats_url, commit_interval=commit_interval):
        waiter = await ProjectionWaiter.open(database)
        try:

            async def applied(through: dict[str, int]) -> None:
                await waiter.until(lambda: waiter.applied.get(REQUESTS_STREAM, 0) >= through[REQUESTS_STREAM])

            lone = await publish(store, traffic("lone", 1))
            async with asyncio.timeout(30):
                await applied(lone)
            burst = await publish(store, traffic("burst", EVENTS_PER_COMMIT))
            yield lambda: applied(burst)
        finally:
            await waiter.close()


async def test_traffic_that_rises_during_a_long_interval_is_applied_without_waiting_it_out(
    private_nats: NatsServer, private_store: EventStore, fresh_database: str
) -> None:
    async with a_burst_after_a_lone_request(private_nats.url, private_store, fresh_database) as applied:
        async with asyncio.timeout(15):  # far less than the minute
            await applied()


async def test_traffic_that_rises_still_waits_for_the_commit_interval(
    private_nats: NatsServer, private_store: EventStore, fresh_database: str
) -> None:
    async with a_burst_after_a_lone_request(
        private_nats.url, private_store, fresh_database, commit_interval=AN_HOUR_S
    ) as applied:
        with pytest.raises(TimeoutError):  # a commit's worth, but the hour has not passed
            async with asyncio.timeout(3):
                await applied()
