"""Messages that left a stream before the projector read them: MF_REQUESTS ages its messages out
(max age), so a projector down longer than that finds a stretch gone; it is recorded and the
projection goes on. MF_EVENTS never drops one: a stretch missing there halts the projection. A
replay compares and swaps only what it can rebuild."""

from __future__ import annotations

import asyncio
import logging

import psycopg
import pytest

from eventstore.store import EventStore, ExpectedVersion
from modelforge.devstack.nats_server import NatsServer
from projections import projector
from projections.replay import SwapRefused, replay
from streams import configs, subjects
from streams.events import control as c
from streams.subjects import Aggregate

from .helpers import aged_out, checkpoints, project_until, requests_aged_out_unread


async def fetch(url: str, query: str) -> list[tuple[object, ...]]:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        return await (await conn.execute(query)).fetchall()


async def test_requests_that_aged_out_before_the_projector_read_them_are_recorded_as_a_gap(
    private_nats: NatsServer, private_store: EventStore, fresh_database: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = private_store
    first, lost, last = await requests_aged_out_unread(store, fresh_database, private_nats.url)
    with caplog.at_level(logging.WARNING, logger="modelforge.projector.gaps"):
        await project_until(fresh_database, private_nats.url, {subjects.REQUESTS_STREAM: last})

    assert await fetch(
        fresh_database, "SELECT stream, first_seq, last_seq, reason FROM mf.projection_gaps"
    ) == [
        (
            subjects.REQUESTS_STREAM,
            first + 1,
            lost,
            "aged out of the stream (its max age) before the projector read them",
        )
    ]
    assert f"MF_REQUESTS sequences {first + 1}-{lost}: 5 message(s) aged out" in caplog.text
    assert (await checkpoints(fresh_database))[subjects.REQUESTS_STREAM] == last
    assert await fetch(fresh_database, "SELECT request_id FROM mf.requests ORDER BY 1") == [
        ("req-1",),
        ("req-7",),
        ("req-8",),
    ]

    # A replay has only what is left; --verify compares what both can hold, --swap refuses.
    verified = await replay(fresh_database, private_nats.url, verify=True, progress=False)
    assert verified.requests_from == lost + 1
    assert verified.differences == []
    assert verified.live_digest == verified.digest
    with pytest.raises(SwapRefused, match=f"holds 1 MF_REQUESTS message\\(s\\) before sequence {lost + 1}"):
        await replay(fresh_database, private_nats.url, swap=True, progress=False)
    assert await fetch(fresh_database, "SELECT request_id FROM mf.requests ORDER BY 1") == [
        ("req-1",),
        ("req-7",),
        ("req-8",),
    ]


async def test_events_missing_from_mf_events_halt_the_projection_before_them(
    private_nats: NatsServer, private_store: EventStore, fresh_database: str
) -> None:
    store = private_store

    async def clients(prefix: str, count: int) -> int:
        last = 0
        for i in range(count):
            created = c.ClientCreated(
                client_id=f"{prefix}{i}",
                name=f"{prefix}{i}",
                scopes=("rag.embedding@1",),
                requests_per_minute=60,
                max_concurrency=2,
            )
            last = await store.append(Aggregate.CLIENT, f"{prefix}{i}", [created], ExpectedVersion.NO_STREAM)
        return last

    first = await clients("a", 1)
    await project_until(fresh_database, private_nats.url, {subjects.EVENTS_STREAM: first})
    # Something (here a max age given to it by hand) removed events the projector had not read.
    lost = await aged_out(
        store, configs.events_stream(), subjects.EVENTS_STREAM, asyncio.ensure_future(clients("b", 3))
    )
    after = await clients("c", 1)
    with pytest.raises(
        projector.ProjectionHalted,
        match=f"MF_EVENTS sequence {after} .*MF_EVENTS sequences {first + 1}-{lost} are missing",
    ):
        async with asyncio.timeout(30):
            await projector.run(fresh_database, private_nats.url, telemetry=False)
    assert (await checkpoints(fresh_database))[subjects.EVENTS_STREAM] == first
    assert await fetch(fresh_database, "SELECT client_id FROM mf.clients") == [("a0",)]
