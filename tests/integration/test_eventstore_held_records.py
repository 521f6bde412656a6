"""Per-request records ride with the next write a connection makes, or go alone a moment later
(`OrderedFlushClient.lazy_subjects`): off the response's path, nothing waits on them but their
own acknowledgement."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from eventstore.connection import Connection, connect
from streams.envelope import new_id
from tests.support.wire import recorded_writes

HEADERS = {"Nats-Msg-Id": "x"}  # records always carry their envelope in headers


@pytest.fixture
async def recorded(nats_url: str) -> AsyncIterator[tuple[Connection, list[list[bytes]]]]:
    """A fresh connection whose lazy subjects are this test's, and every write it makes from now on
    (each a list of the commands written together)."""
    conn = await connect(nats_url, "lazy-records-test")
    conn.client.lazy_subjects = f"test.lazy.{new_id()}."  # type: ignore[attr-defined]
    yield conn, recorded_writes(conn)
    await conn.close()


async def turns(count: int = 20) -> None:
    """Let the event loop run what is ready (the connection's flusher among it)."""
    for _ in range(count):
        await asyncio.sleep(0)


async def test_a_record_is_written_with_the_next_message_the_connection_sends(
    recorded: tuple[Connection, list[list[bytes]]],
) -> None:
    conn, wire = recorded
    conn.client.lazy_flush_s = 3600.0  # type: ignore[attr-defined]  # nothing but the next write takes it
    lazy = f"{conn.client.lazy_subjects}RequestCompleted"  # type: ignore[attr-defined]
    await conn.client.publish(lazy, b"{}", headers=HEADERS)
    await turns()
    assert not wire
    await conn.client.publish(f"test.other.{new_id()}", b"{}", headers=HEADERS)
    await turns()
    ((first, second),) = wire
    assert first.startswith(f"HPUB {lazy} ".encode())
    assert second.startswith(b"HPUB test.other.")


async def test_a_record_with_nothing_after_it_reaches_subscribers_alone(
    recorded: tuple[Connection, list[list[bytes]]], nats_url: str
) -> None:
    conn, _wire = recorded
    lazy = f"{conn.client.lazy_subjects}RequestCompleted"  # type: ignore[attr-defined]
    listener = await connect(nats_url, "lazy-records-listener")
    try:
        subscription = await listener.client.subscribe(lazy)
        await listener.client.flush()
        await conn.client.publish(lazy, b"{}", headers=HEADERS)
        assert (await subscription.next_msg(timeout=5)).subject == lazy
    finally:
        await listener.close()
