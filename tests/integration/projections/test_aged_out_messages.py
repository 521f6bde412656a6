"""Messages that left a stream before the projector read them: MF_REQUESTS ages its messages out
(max age), so a projector down longer than that finds a stretch gone; it is recorded and the
projection goes on. MF_EVENTS never drops one: a stretch missing there halts the projection. A
replay compares and swaps only what it can rebuild."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Iterable

import psycopg
import pytest
from nats.js.api import StreamConfig

from eventstore.store import EventStore, ExpectedVersion
from modelforge.devstack.nats_server import NatsServer
from projections import projector
from projections.replay import SwapRefused, replay
from streams import configs, subjects
from streams.events import control as c
from streams.subjects import Aggregate

from .helpers import accepted, checkpoints, project_until

EXPIRY_S = 1.0


async def fetch(url: str, query: str) -> list[tuple[object, ...]]:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        return await (await conn.execute(query)).fetchall()


async def record(store: EventStore, ids: Iterable[str]) -> int:
    last = 0
    for rid in ids:
        last = await store.record_request("rag.embedding@1", rid, accepted(rid))
    return last


async def aged_out(store: EventStore, config: StreamConfig, name: str, publish: asyncio.Task[int]) -> int:
    """Run `publish` while `config`'s stream keeps messages EXPIRY_S only, wait until the server
    has expired every one, then give the stream its own config back; returns `publish`'s result."""
    js = store.client.jetstream()
    short = dataclasses.replace(config, max_age=EXPIRY_S, duplicate_window=EXPIRY_S)
    await js.update_stream(short)
    try:
        last = await publish
        # The server expires them on its own timer, which nothing announces: look at the stream.
        for _ in range(120):
            if not (await js.stream_info(name)).state.messages:
                break
            await asyncio.sleep(EXPIRY_S / 4)
        else:
            raise AssertionError(f"{name} still holds messages {120 * EXPIRY_S / 4:.0f} s past their max age")
    finally:
        await js.update_stream(config)
    return last


async def test_requests_that_aged_out_before_the_projector_read_them_are_recorded_as_a_gap(
    private_nats: NatsServer, private_store: EventStore, fresh_database: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = private_store
    first = await record(store, ["req-1"])
    await project_until(fresh_database, private_nats.url, {subjects.REQUESTS_STREAM: first})
    # The projector is down while five requests arrive and age out.
    lost = await aged_out(
        store,
        configs.requests_stream(),
        subjects.REQUESTS_STREAM,
        asyncio.ensure_future(record(store, [f"req-lost-{i}" for i in range(5)])),
    )
    last = await record(store, ["req-7", "req-8"])
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
