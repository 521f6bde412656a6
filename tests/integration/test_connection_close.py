"""Closing a connection ends what nats-py left running for it: an ordered consumer's re-creation
(a task nats-py starts when the consumer's heartbeats stop, and does not keep), which would
otherwise wait out the JetStream timeout after the connection it was for is gone."""

from __future__ import annotations

import asyncio
from typing import Any

from eventstore.connection import Connection, connect, consumer_recreations
from modelforge.devstack.nats_server import NatsServer


async def _ordered(nats: NatsServer, name: str, stream: str) -> tuple[Connection, Any]:
    """A connection with an ordered consumer on `stream`, and that consumer's subscription."""
    connection = await connect(nats.url, name)
    js = connection.client.jetstream()
    await js.add_stream(name=stream, subjects=[f"{stream}.>"])
    return connection, await js.subscribe(f"{stream}.>", ordered_consumer=True)


async def test_closing_a_connection_ends_its_consumer_recreations_and_no_other_connections(
    private_nats: NatsServer,
) -> None:
    closing, closing_consumer = await _ordered(private_nats, "closing", "CLOSE_A")
    staying, staying_consumer = await _ordered(private_nats, "staying", "CLOSE_B")
    # The closing connection's re-creation asks an API that never answers (as one does while its
    # stream elects a leader): it would wait out its 60 s timeout.
    await staying.client.subscribe("$SILENT.API.>")
    await staying.client.flush()
    jsi = closing_consumer._sub._jsi
    jsi._js = closing.client.jetstream(prefix="$SILENT.API", timeout=60)
    mine = asyncio.create_task(jsi.recreate_consumer())  # started the way nats-py starts one
    theirs = asyncio.create_task(staying_consumer._sub._jsi.recreate_consumer())
    try:
        assert consumer_recreations(closing.client) == [mine]
        assert consumer_recreations(staying.client) == [theirs]
        await closing_consumer.unsubscribe()  # as its owner stops it: the re-creation runs on
        assert not mine.done()
        await closing.close()
        assert mine.cancelled()
        async with asyncio.timeout(10):
            await theirs  # the other connection's is left to finish
    finally:
        await staying_consumer.unsubscribe()
        await staying.close()
