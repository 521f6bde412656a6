"""A connection's `flush()` returns once the server has read every command sent before it: a
subscription is live for other connections (the agent's invoke interest before it announces a
model loaded), and a drained one takes nothing more (an unload's in-flight invokes)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from eventstore.connection import Connection, connect
from streams.envelope import new_id
from tests.support.wire import recorded_writes


@pytest.fixture
async def recorded(nats_url: str) -> AsyncIterator[tuple[Connection, list[list[bytes]]]]:
    """A fresh connection, and every write it makes to its socket from now on."""
    conn = await connect(nats_url, "flush-order-test")
    yield conn, recorded_writes(conn)
    await conn.close()


def _sent_before_the_last_ping(writes: list[list[bytes]], command: bytes) -> bool:
    """The server answers PINGs in order: the last one's PONG is what the flush waited for."""
    wire = [data for written in writes for data in written]
    sent = next(i for i, data in enumerate(wire) if data.startswith(command))
    last_ping = max(i for i, data in enumerate(wire) if data == b"PING\r\n")
    return sent < last_ping


async def test_a_subscription_reaches_the_server_before_the_flush_that_follows_it(
    recorded: tuple[Connection, list[list[bytes]]],
) -> None:
    conn, wire = recorded
    subject = f"test.flush.{new_id()}"
    await conn.client.subscribe(subject)
    await conn.client.flush()
    assert _sent_before_the_last_ping(wire, f"SUB {subject} ".encode())


async def test_a_drained_subscription_unsubscribes_before_the_drain_waits_for_the_server(
    recorded: tuple[Connection, list[list[bytes]]],
) -> None:
    conn, wire = recorded
    subscription = await conn.client.subscribe(f"test.flush.{new_id()}")
    await conn.client.flush()
    wire.clear()
    await subscription.drain()
    assert _sent_before_the_last_ping(wire, f"UNSUB {subscription._id} ".encode())
