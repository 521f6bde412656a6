"""A connection's `flush()` returns once the server has read every command sent before it: a
subscription is live for other connections (the agent's invoke interest before it announces a
model loaded), and a drained one takes nothing more (an unload's in-flight invokes)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable

import pytest

from eventstore.connection import Connection, connect
from streams.envelope import new_id


@pytest.fixture
async def recorded(nats_url: str) -> AsyncIterator[tuple[Connection, list[bytes]]]:
    """A fresh connection, and every write it makes to its socket from now on."""
    conn = await connect(nats_url, "flush-order-test")
    wire: list[bytes] = []
    transport = conn.client._transport
    assert transport is not None
    write, writelines = transport.write, transport.writelines

    def recorded_write(data: bytes) -> None:
        wire.append(bytes(data))
        write(data)

    def recorded_writelines(lines: Iterable[bytes]) -> None:
        lines = [bytes(line) for line in lines]
        wire.extend(lines)
        writelines(lines)

    transport.write = recorded_write  # type: ignore[method-assign]
    transport.writelines = recorded_writelines  # type: ignore[method-assign]
    yield conn, wire
    await conn.close()


def _sent_before_the_last_ping(wire: list[bytes], command: bytes) -> bool:
    """The server answers PINGs in order: the last one's PONG is what the flush waited for."""
    sent = next(i for i, data in enumerate(wire) if data.startswith(command))
    last_ping = max(i for i, data in enumerate(wire) if data == b"PING\r\n")
    return sent < last_ping


async def test_a_subscription_reaches_the_server_before_the_flush_that_follows_it(
    recorded: tuple[Connection, list[bytes]],
) -> None:
    conn, wire = recorded
    subject = f"test.flush.{new_id()}"
    await conn.client.subscribe(subject)
    await conn.client.flush()
    assert _sent_before_the_last_ping(wire, f"SUB {subject} ".encode())


async def test_a_drained_subscription_unsubscribes_before_the_drain_waits_for_the_server(
    recorded: tuple[Connection, list[bytes]],
) -> None:
    conn, wire = recorded
    subscription = await conn.client.subscribe(f"test.flush.{new_id()}")
    await conn.client.flush()
    wire.clear()
    await subscription.drain()
    assert _sent_before_the_last_ping(wire, f"UNSUB {subscription._id} ".encode())
