"""Publishing scenario items and running a projector in-process until it reaches a point."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Iterable

import psycopg
import pytest
from nats.js.api import StreamConfig

from eventstore.store import EventStore, ExpectedVersion, prepare
from projections import projector
from projections.migrate import migrate
from projections.scenario import Item
from streams import configs, subjects
from streams.envelope import SYSTEM
from streams.events import control as c
from streams.events import requests as r
from streams.subjects import Aggregate
from tests.support.serving import InProcessGateway


async def publish(store: EventStore, items: Iterable[Item], window: int = 200) -> dict[str, int]:
    """Append every item (pipelined, no concurrency checks); returns the last sequence per stream."""
    last = {"MF_EVENTS": 0, "MF_REQUESTS": 0}
    batch: list[Item] = []

    async def one(item: Item) -> tuple[str, int]:
        aggregate, ident, event = item
        if aggregate is None:
            request_id = event.request_id
            return "MF_REQUESTS", await store.record_request(ident, request_id, event)
        return "MF_EVENTS", await store.append(aggregate, ident, [event], ExpectedVersion.ANY)

    async def flush() -> None:
        for stream, seq in await asyncio.gather(*(one(i) for i in batch)):
            last[stream] = max(last[stream], seq)
        batch.clear()

    for item in items:
        # Items of one aggregate keep their order: flush before a second item of the same subject.
        batch.append(item)
        if len(batch) >= window:
            await flush()
    if batch:
        await flush()
    return last


async def migrated(database_url: str, schema: str = "mf") -> None:
    """Create the read model's tables before any projector runs (as a started one would)."""
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        await migrate(conn, schema)


async def projected(store: EventStore, database_url: str, nats_url: str, items: Iterable[Item]) -> None:
    """Publish `items` (see `publish`) and project them into a freshly migrated schema."""
    last = await publish(store, items)
    await migrated(database_url)
    await project_until(database_url, nats_url, last)


async def checkpoints(database_url: str, schema: str = "mf") -> dict[str, int]:
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        try:
            cur = await conn.execute(f"SELECT stream, last_seq FROM {schema}.checkpoints")
        except psycopg.errors.UndefinedTable:
            return {}
        return {s: q for s, q in await cur.fetchall()}


async def project_until(
    database_url: str,
    nats_url: str,
    target: dict[str, int],
    schema: str = "mf",
    timeout: float = 60.0,
    **kwargs: object,
) -> None:
    """Run a projector in this process until its checkpoints reach `target`, then stop it."""
    stop = asyncio.Event()
    reached = asyncio.Event()

    def seen(done: dict[str, int]) -> None:
        if all(done.get(s, 0) >= q for s, q in target.items()):
            reached.set()

    task = asyncio.create_task(
        projector.run(database_url, nats_url, schema, stop=stop, on_batch=seen, telemetry=False, **kwargs)
    )  # type: ignore[arg-type]
    try:
        if all(q == 0 for q in target.values()):
            reached.set()
        waiting = asyncio.create_task(reached.wait())
        done, _ = await asyncio.wait((waiting, task), timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            task.result()
        assert waiting in done, f"projector did not reach {target} in {timeout} s"
    finally:
        stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)


@contextlib.asynccontextmanager
async def projecting(
    database_url: str, nats_url: str, commit_interval: float | None = None
) -> AsyncIterator[None]:
    """A projector running in this process into `database_url` for the block, then stopped."""
    stop = asyncio.Event()
    interval = projector.COMMIT_INTERVAL_S if commit_interval is None else commit_interval
    task = asyncio.create_task(
        projector.run(database_url, nats_url, stop=stop, telemetry=False, commit_interval=interval)
    )
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


async def publish_raw(store: EventStore, subject: str, event_type: str, data: bytes) -> int:
    (out,) = prepare([c.ClientEnabled(client_id="x")], Aggregate.CLIENT, "x", SYSTEM, None, None)
    headers = {**out.headers, "Mf-Event-Type": event_type}
    ack = await store.client.jetstream().publish(subject, data, headers=headers)
    return ack.seq


def accepted(rid: str, gateway_id: str = "") -> r.RequestAccepted:
    return r.RequestAccepted(
        request_id=rid,
        client_id="c",
        capability="rag.embedding@1",
        input_sha256="0" * 64,
        shape_bucket="items:1",
        items=1,
        gateway_id=gateway_id,
    )


async def record_requests(store: EventStore, ids: Iterable[str]) -> int:
    """Record one RequestAccepted per id; returns the last MF_REQUESTS sequence."""
    last = 0
    for rid in ids:
        last = await store.record_request("rag.embedding@1", rid, accepted(rid))
    return last


EXPIRY_S = 1.0


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


async def requests_aged_out_unread(
    store: EventStore, database_url: str, nats_url: str
) -> tuple[int, int, int]:
    """req-1 projected; then, the projector down, five requests arrive and age out of MF_REQUESTS
    unread, and req-7 and req-8 arrive. Returns the sequences of req-1, the last lost one and req-8."""
    first = await record_requests(store, ["req-1"])
    await project_until(database_url, nats_url, {subjects.REQUESTS_STREAM: first})
    lost = await aged_out(
        store,
        configs.requests_stream(),
        subjects.REQUESTS_STREAM,
        asyncio.ensure_future(record_requests(store, [f"req-lost-{i}" for i in range(5)])),
    )
    return first, lost, await record_requests(store, ["req-7", "req-8"])


async def halted_by_an_unknown_event(
    gateway: InProcessGateway, store: EventStore, database: str, nats_url: str
) -> int:
    """Halt the projection for real: an event type this projector does not know (as after a gateway
    upgraded first) stops it there; returns that event's sequence once `gateway`'s read model has
    heard of the halt."""
    unknown = await publish_raw(
        store, "mf.evt.client.x.ClientTeleported", "ClientTeleported", b'{"to":"mars"}'
    )
    with pytest.raises(projector.ProjectionHalted):
        async with asyncio.timeout(30):
            await projector.run(database, nats_url, telemetry=False)
    assert gateway.replica is not None
    model = gateway.replica.edge.read_models.get()
    assert model is not None
    assert model.waiter is not None
    waiter = model.waiter
    async with asyncio.timeout(30):  # the halt's notification reaches it
        await waiter.until(lambda: subjects.EVENTS_STREAM in waiter.halted)
    return unknown
