"""`projections.source.read` following a stream: its first chunk is what the stream held when it
started, whole, however many socket reads that takes; with nothing held, an empty chunk says so at
once. (The projector's first commit holds every stream's backlog: a request's events together.)"""

from __future__ import annotations

import asyncio

from eventstore.store import EventStore
from modelforge.devstack.nats_server import NatsServer
from projections import source
from streams import subjects

PAYLOAD = b"x" * 60_000
# Past one socket read (1 MiB): the backlog arrives in several.
MESSAGES = 3 * (1 << 20) // len(PAYLOAD)


async def test_a_followers_first_chunk_is_the_streams_whole_backlog(
    private_nats: NatsServer, private_store: EventStore
) -> None:
    js = private_store.client.jetstream()
    subject = subjects.event_subject(subjects.Aggregate.DEPLOYMENT, "backlog", "BacklogFilled")
    acks = [await js.publish(subject, PAYLOAD) for _ in range(MESSAGES)]
    chunks = source.read(subjects.EVENTS_STREAM, 1, urls=private_nats.url)
    try:
        async with asyncio.timeout(30):
            first = await anext(chunks)
    finally:
        await chunks.aclose()

    assert [d.seq for d in first] == [ack.seq for ack in acks]


async def test_a_follower_of_an_empty_stream_hands_over_an_empty_first_chunk(
    private_nats: NatsServer, private_store: EventStore
) -> None:
    chunks = source.read(subjects.EVENTS_STREAM, 1, urls=private_nats.url)
    try:
        async with asyncio.timeout(30):  # (a follower that waits for a message would wait for good)
            first = await anext(chunks)
    finally:
        await chunks.aclose()

    assert first == []
