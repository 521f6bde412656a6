"""A connection's publishes are written by a callback once the event loop's turn is done, not by
nats-py's flusher task; while the socket is backed up, the flusher writes them, with its wait for
the socket to drain (`OrderedFlushClient._write_soon`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from eventstore.connection import Connection, connect
from streams.envelope import new_id
from tests.support.wire import recorded_writes

HEADERS = {"Nats-Msg-Id": "x"}


@pytest.fixture
async def conn(nats_url: str) -> AsyncIterator[Connection]:
    conn = await connect(nats_url, "written-soon-test")
    yield conn
    await conn.close()


def flusher_kicks(conn: Connection) -> list[object]:
    """Every time nats-py is asked to wake its flusher from now on."""
    kicks: list[object] = []
    queue = conn.client._flush_queue
    assert queue is not None
    put = queue.put

    async def counted_put(item: Any) -> None:
        kicks.append(item)
        await put(item)

    queue.put = counted_put  # type: ignore[method-assign]
    return kicks


class BackedUp:
    """The connection's writer, as it is while the socket takes no more (bytes wait in its buffer)."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    class transport:  # noqa: N801  (the attribute a StreamWriter has)
        @staticmethod
        def get_write_buffer_size() -> int:
            return 1

    def __getattr__(self, name: str) -> Any:
        return getattr(self._writer, name)


async def turns(count: int = 20) -> None:
    for _ in range(count):
        await asyncio.sleep(0)


async def test_publishes_of_one_turn_are_written_together_without_the_flusher(conn: Connection) -> None:
    wire, kicks = recorded_writes(conn), flusher_kicks(conn)
    subject = f"test.soon.{new_id()}"
    for _ in range(3):
        await conn.client.publish(subject, b"{}", headers=HEADERS)
    await turns()
    (written,) = wire
    assert [command.split(b" ")[1] for command in written] == [subject.encode()] * 3
    assert not kicks


async def test_a_publish_while_the_socket_is_backed_up_is_left_to_the_flusher(
    conn: Connection, nats_url: str
) -> None:
    listener = await connect(nats_url, "written-soon-listener")
    transport = conn.client._transport
    writer = transport._io_writer  # type: ignore[union-attr]
    try:
        subject = f"test.soon.{new_id()}"
        subscription = await listener.client.subscribe(subject)
        await listener.client.flush()
        kicks = flusher_kicks(conn)
        transport._io_writer = BackedUp(writer)  # type: ignore[union-attr]
        await conn.client.publish(subject, b"{}", headers=HEADERS)
        await turns()
        assert kicks
        assert (await subscription.next_msg(timeout=5)).subject == subject
    finally:
        transport._io_writer = writer  # type: ignore[union-attr]
        await listener.close()
