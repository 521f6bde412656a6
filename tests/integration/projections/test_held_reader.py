"""`projections.source.read` with a hold (the projector's readers while events wait for the commit
interval): what arrives while it is held comes, once it is let go, as one chunk up to a PING's
PONG; with nothing arrived, an empty chunk says so."""

from __future__ import annotations

import asyncio

from eventstore.store import EventStore
from modelforge.devstack.nats_server import NatsServer
from projections import source
from projections.scenario import traffic
from streams import subjects

from .helpers import publish


async def test_what_arrives_while_held_is_one_chunk_once_let_go(
    private_nats: NatsServer, private_store: EventStore
) -> None:
    first = await publish(private_store, traffic("first", 1))
    hold = asyncio.Event()
    hold.set()
    chunks = source.read(subjects.EVENTS_STREAM, 1, urls=private_nats.url, hold=hold)
    try:
        async with asyncio.timeout(30):
            seen = [d.seq for d in await anext(chunks)]
            while seen[-1] < first["MF_EVENTS"]:
                seen += [d.seq for d in await anext(chunks)]

            hold.clear()
            asking = asyncio.create_task(anext(chunks))
            later = await publish(private_store, traffic("later", 3))
            await asyncio.sleep(0)
            assert not asking.done()  # held: nothing is read
            hold.set()
            held = [d.seq for d in await asking]
            assert held == list(range(first["MF_EVENTS"] + 1, later["MF_EVENTS"] + 1))

            hold.clear()
            asking = asyncio.create_task(anext(chunks))
            await asyncio.sleep(0)
            hold.set()
            assert await asking == []
    finally:
        await chunks.aclose()
