"""The commit interval bounds how often a projector commits under steady traffic, never how long
the first events after a quiet spell wait (those commit after a short linger for the rest of
their request, `projections.pace.QUIET_LINGER_S`), nor how long a reader waiting for a
sequence waits (it asks for it: `projections.wanted`), nor how long traffic that rises during a
trickle's long interval waits (its readers' sockets fill: `projections.swell`)."""

from __future__ import annotations

import asyncio

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


async def test_traffic_that_rises_during_a_long_interval_is_applied_without_waiting_it_out(
    private_nats: NatsServer, private_store: EventStore, fresh_database: str
) -> None:
    async with projecting(fresh_database, private_nats.url):
        waiter = await ProjectionWaiter.open(fresh_database)
        try:

            def applied(through: dict[str, int]) -> bool:  # heard from the projector, never asked
                return waiter.applied.get(REQUESTS_STREAM, 0) >= through[REQUESTS_STREAM]

            lone = await publish(private_store, traffic("lone", 1))
            async with asyncio.timeout(30):
                await waiter.until(lambda: applied(lone))
            # That lone request after a quiet spell is a trickle's rate: the next commit is a
            # minute away. Then a commit's worth of requests arrives at once.
            burst = await publish(private_store, traffic("burst", EVENTS_PER_COMMIT))

            async with asyncio.timeout(15):  # far less than the minute
                await waiter.until(lambda: applied(burst))
        finally:
            await waiter.close()


async def test_traffic_that_rises_still_waits_for_the_commit_interval(
    private_nats: NatsServer, private_store: EventStore, fresh_database: str
) -> None:
    async with projecting(fresh_database, private_nats.url, commit_interval=AN_HOUR_S):
        waiter = await ProjectionWaiter.open(fresh_database)
        try:

            def applied(through: dict[str, int]) -> bool:  # heard from the projector, never asked
                return waiter.applied.get(REQUESTS_STREAM, 0) >= through[REQUESTS_STREAM]

            lone = await publish(private_store, traffic("lone", 1))
            async with asyncio.timeout(30):
                await waiter.until(lambda: applied(lone))
            burst = await publish(private_store, traffic("burst", EVENTS_PER_COMMIT))

            with pytest.raises(TimeoutError):  # a commit's worth, but the hour has not passed
                async with asyncio.timeout(3):
                    await waiter.until(lambda: applied(burst))
            assert await waiter.wait(burst[REQUESTS_STREAM], REQUESTS_STREAM, timeout=30.0)  # asked for
        finally:
            await waiter.close()
