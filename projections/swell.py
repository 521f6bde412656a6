"""Waking a held reader once what waits unread in its socket passes a mark.

A projector's reader leaves its socket unread while its events wait for the commit interval (no
wake-up per message; `projections.source.read`'s hold). What NATS sends meanwhile waits in the
kernel's buffers and, once those are full, in nats-server's, whose writes to the socket then stall:
past its write deadline (10 s by default) nats-server drops the connection as a slow consumer, and
the reader, resuming, holds again. At a trickle's interval of up to a minute a burst of traffic did
that over and over. `swollen` waits, reading nothing, until `SWELL_BYTES` wait in the socket; the
kernel tells (SO_RCVLOWAT: the socket polls readable only from that many bytes on), so at a trickle
it costs no wake-up at all.
"""

from __future__ import annotations

import asyncio
import os
import socket

# About 100 of our events (a commit's worth). Setting the mark grows the socket's receive buffer to
# twice it, so the kernel holds it all before nats-server's writes stall. Each time it passes costs
# a read of what waits and a PING's round trip: at 5 requests a second a projector spent 0.39 ms a
# request at 32 KiB, 0.34 at 64 KiB (bench.trickle; docs/performance.md).
SWELL_BYTES = 64 * 1024


async def swollen(transport: asyncio.BaseTransport, mark: int = SWELL_BYTES) -> None:
    """Return once `mark` bytes or more wait unread in `transport`'s socket (its reading paused)."""
    sock = transport.get_extra_info("socket")
    loop = asyncio.get_running_loop()
    passed: asyncio.Future[None] = loop.create_future()
    if sock is None:  # nothing to watch: never
        await passed
    # A second descriptor of the same socket: the event loop watches each descriptor for one owner.
    fd = os.dup(sock.fileno())
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, mark)
        loop.add_reader(fd, _settle, passed)
        await passed
    finally:
        loop.remove_reader(fd)
        os.close(fd)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, 1)


def _settle(passed: asyncio.Future[None]) -> None:
    if not passed.done():
        passed.set_result(None)
