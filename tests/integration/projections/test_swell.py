"""A held reader's socket wakes it once enough waits unread in it, not before, and is left as it
was found (`projections.swell`)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from projections.swell import swollen

MARK = 16 * 1024


@asynccontextmanager
async def held_connection() -> AsyncIterator[tuple[asyncio.ReadTransport, asyncio.StreamWriter]]:
    """A loopback TCP connection: its reading end's transport, paused, and a writer into it."""
    accepted: asyncio.Queue[asyncio.StreamWriter] = asyncio.Queue()

    async def accept(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await accepted.put(writer)

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    _, reading = await asyncio.open_connection("127.0.0.1", port)
    sending = await accepted.get()
    transport = reading.transport
    assert isinstance(transport, asyncio.ReadTransport)
    transport.pause_reading()
    try:
        yield transport, sending
    finally:
        reading.close()
        sending.close()
        server.close()
        await server.wait_closed()


async def test_a_held_socket_wakes_its_reader_once_the_mark_is_passed_and_not_before() -> None:
    async with held_connection() as (transport, sending):
        waiting = asyncio.ensure_future(swollen(transport, MARK))
        sending.write(b"x" * (MARK // 2))
        await sending.drain()
        done, _ = await asyncio.wait([waiting], timeout=0.2)
        assert not done  # half the mark unread: no wake-up

        sending.write(b"x" * MARK)
        await sending.drain()
        async with asyncio.timeout(10):
            await waiting


async def test_the_socket_s_mark_is_put_back_once_the_wait_ends() -> None:
    async with held_connection() as (transport, _):
        sock = transport.get_extra_info("socket")
        waiting = asyncio.ensure_future(swollen(transport, MARK))
        await asyncio.sleep(0)  # it runs up to its wait
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT) == MARK

        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)

        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT) == 1
