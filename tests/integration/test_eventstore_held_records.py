"""Per-request records are held apart from a connection's other writes for a moment, then written
together (`OrderedFlushClient.held_subjects`): off the response's path, nothing waits on them but
their own acknowledgement, and held together they are acknowledged together."""

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
    """A fresh connection whose held subjects are this test's, and every write it makes from now on
    (each a list of the commands written together)."""
    conn = await connect(nats_url, "held-records-test")
    conn.client.held_subjects = f"test.held.{new_id()}."  # type: ignore[attr-defined]
    yield conn, recorded_writes(conn)
    await conn.close()


async def turns(count: int = 20) -> None:
    """Let the event loop run what is ready (the connection's flusher among it)."""
    for _ in range(count):
        await asyncio.sleep(0)


def record(conn: Connection) -> str:
    return f"{conn.client.held_subjects}RequestCompleted"  # type: ignore[attr-defined]


async def test_a_record_is_not_written_with_the_next_message_the_connection_sends(
    recorded: tuple[Connection, list[list[bytes]]],
) -> None:
    conn, wire = recorded
    conn.client.held_for_s = 3600.0  # type: ignore[attr-defined]
    await conn.client.publish(record(conn), b"{}", headers=HEADERS)
    await conn.client.publish(f"test.other.{new_id()}", b"{}", headers=HEADERS)
    await turns()
    ((other,),) = wire
    assert other.startswith(b"HPUB test.other.")


async def test_records_held_together_are_written_together_once_their_time_is_up(
    recorded: tuple[Connection, list[list[bytes]]],
) -> None:
    conn, wire = recorded
    conn.client.held_for_s = 0.05  # type: ignore[attr-defined]
    released = asyncio.Event()
    write_held = conn.client.write_held  # type: ignore[attr-defined]

    def writing_held() -> None:
        write_held()
        released.set()

    conn.client.write_held = writing_held  # type: ignore[attr-defined]
    for _ in range(3):
        await conn.client.publish(record(conn), b"{}", headers=HEADERS)
    await turns()
    assert not wire
    await asyncio.wait_for(released.wait(), 5)  # (the 50 ms timer, however slow the machine)
    await turns()
    (written,) = wire
    assert [command.split(b" ")[1] for command in written] == [record(conn).encode()] * 3


async def test_records_are_written_once_they_pass_the_bytes_held(
    recorded: tuple[Connection, list[list[bytes]]],
) -> None:
    conn, wire = recorded
    conn.client.held_for_s = 3600.0  # type: ignore[attr-defined]
    conn.client.held_bytes_max = 300  # type: ignore[attr-defined]
    await conn.client.publish(record(conn), b"{}", headers=HEADERS)
    await turns()
    assert not wire
    await conn.client.publish(record(conn), b"x" * 300, headers=HEADERS)
    await turns()
    (written,) = wire
    assert len(written) == 2


async def test_a_flush_writes_what_is_held(
    recorded: tuple[Connection, list[list[bytes]]], nats_url: str
) -> None:
    conn, _wire = recorded
    conn.client.held_for_s = 3600.0  # type: ignore[attr-defined]
    listener = await connect(nats_url, "held-records-listener")
    try:
        subscription = await listener.client.subscribe(record(conn))
        await listener.client.flush()
        await conn.client.publish(record(conn), b"{}", headers=HEADERS)
        await conn.client.flush()
        assert (await subscription.next_msg(timeout=5)).subject == record(conn)
    finally:
        await listener.close()


async def test_a_record_with_nothing_after_it_reaches_subscribers_alone(
    recorded: tuple[Connection, list[list[bytes]]], nats_url: str
) -> None:
    conn, _wire = recorded
    listener = await connect(nats_url, "held-records-listener")
    try:
        subscription = await listener.client.subscribe(record(conn))
        await listener.client.flush()
        await conn.client.publish(record(conn), b"{}", headers=HEADERS)
        assert (await subscription.next_msg(timeout=5)).subject == record(conn)
    finally:
        await listener.close()
