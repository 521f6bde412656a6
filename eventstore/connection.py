"""Connecting to NATS the way a long-running service must: reconnect forever, never give up.

nats-py stops reconnecting after 60 attempts (~2 min) by default; a service must outlive a
server restart or a network partition of any length.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nkeys
from nats.aio.client import DEFAULT_FLUSH_TIMEOUT, DEFAULT_INBOX_PREFIX, Client
from nats.errors import (
    ConnectionClosedError,
    ConnectionDrainingError,
    MaxPayloadError,
    OutboundBufferLimitError,
)
from nats.protocol.command import hpub_cmd

from eventstore.nats_headers import header_block, parse_header_lines
from eventstore.tls import nats_tls
from streams import subjects

log = logging.getLogger("modelforge.nats")

DEFAULT_URL = "nats://127.0.0.1:4222"


def nats_url() -> str:
    return os.environ.get("NATS_URL", DEFAULT_URL)


# A node agent signs in with its node's nkey (`modelforge nodes credentials` writes the seed file);
# other roles with a user and password in NATS_URL.
NKEY_SEED_ENV = "NATS_NKEY_SEED"


def public_key_of(seed: bytes) -> str:
    """The public half ("U...") of a NATS user nkey seed ("SU...")."""
    return bytes(nkeys.from_seed(bytearray(seed.strip())).public_key).decode()


def inbox_prefix(seed_file: str | None) -> str:
    """Where replies come: for a connection signing in with a seed, the inbox that key's user
    alone may read; else nats-py's own."""
    if not seed_file:
        return DEFAULT_INBOX_PREFIX.decode()
    return subjects.node_inbox_prefix(public_key_of(Path(seed_file).read_bytes()))


class Connection:
    """A NATS client plus an event that is set while connected, so retries wait on it, and those to
    tell when it drops (`watch_drop`)."""

    def __init__(self, client: Client, connected: asyncio.Event) -> None:
        self.client = client
        self.connected = connected
        self._drop_watchers: dict[str, Callable[[], None]] = {}

    def watch_drop(self, key: str, dropped: Callable[[], None]) -> None:
        """Call `dropped` (once) if the connection drops: whatever was in flight through its server
        (a request, its reply) may be lost with it, and nothing else says so. `unwatch_drop` after."""
        self._drop_watchers[key] = dropped

    def unwatch_drop(self, key: str) -> None:
        self._drop_watchers.pop(key, None)

    def dropped(self) -> None:
        watchers, self._drop_watchers = self._drop_watchers, {}
        for watcher in watchers.values():
            watcher()

    async def wait_connected(self, timeout: float) -> bool:
        try:
            async with asyncio.timeout(timeout):
                await self.connected.wait()
        except TimeoutError:
            return False
        return True

    async def close(self) -> None:
        # An ordered consumer whose heartbeats stopped (its stream electing a leader) is re-created
        # by a task nats-py starts and does not keep; one still waiting on its request (up to the
        # JetStream timeout) would outlive the connection, and hold its drain up meanwhile. It has
        # nothing left to do: it goes first.
        leftover = consumer_recreations(self.client)
        for task in leftover:
            task.cancel()
        if leftover:
            await asyncio.wait(leftover, timeout=1.0)
        if not self.client.is_closed:
            await self.client.drain()


def consumer_recreations(client: Client) -> list[asyncio.Task[Any]]:
    """nats-py's ordered-consumer re-creations for `client` still running (nats-py 2.x: a task of
    `JetStreamContext._JSI.recreate_consumer` whose subscription's connection is `client`)."""
    found: list[asyncio.Task[Any]] = []
    for task in asyncio.all_tasks():
        coro = task.get_coro()
        if task.done() or not getattr(coro, "__qualname__", "").endswith("_JSI.recreate_consumer"):
            continue
        frame = getattr(coro, "cr_frame", None)
        owner = frame.f_locals.get("self") if frame is not None else None
        if getattr(owner, "_conn", None) is client:
            found.append(task)
    return found


class OrderedFlushClient(Client):
    """nats-py's client whose `flush()` covers every command sent before it.

    nats-py (2.16) writes flush()'s PING straight to the socket while earlier commands (a SUB, an
    UNSUB) wait in its buffer for the flusher task, so the PONG can come back before the server
    has read them: a subscription "made live" by subscribe + flush could get an invoke sent at
    once by another connection answered with no responders, and a drained one (nats-py's
    `Subscription.drain` unsubscribes, then flushes) could be handed a request after it stopped
    reading, which then waits for its deadline. Putting the buffer on the wire first closes both.
    (The PONG speaks for the connection's own server: a cluster carries interest to the others on
    its own time.)

    The buffer is written here as the flusher task writes it, with no wait before the PING: waiting
    for the flusher instead would wait outside the flush's timeout (and swallow a cancellation)
    while a reconnect holds the flusher up. tests/integration/test_eventstore_flush_order.py checks
    the order on the wire against the installed nats-py.
    """

    # Header blocks (every event carries its envelope in seven or more headers) read and written
    # by `eventstore.nats_headers`: nats-py's own rules, in fewer Python steps.
    _parse_header_lines = staticmethod(parse_header_lines)
    # Per-request records (MF_REQUESTS) are written off the response's path and nothing waits on
    # them but their own acknowledgement, so they are held apart from the buffer and written
    # together, `held_for_s` after the first (sooner once `held_bytes_max` wait, or at a flush):
    # their acknowledgements come back together, one read of the socket for every request of that
    # moment instead of one a request, which measured 5-8 % of the gateway's CPU at one client
    # (docs/performance.md, "Request records held for 25 ms"). A gateway killed outright loses
    # what it held, as it loses what it had written and not yet had acknowledged.
    held_subjects = f"{subjects.REQUESTS_PREFIX}."
    held_for_s = 0.025
    held_bytes_max = 64 * 1024

    def __init__(self) -> None:
        super().__init__()
        self._held: list[bytes] = []
        self._held_size = 0
        self._release: asyncio.TimerHandle | None = None
        self._releasing: asyncio.Future[Any] | None = None  # (referenced until it has run)
        self._write_due = False  # `_write_pending` is called soon

    async def _send_publish(
        self, subject: str, reply: str, payload: bytes, payload_size: int, headers: dict[str, Any] | None
    ) -> None:
        if headers is None or not subject:  # nats-py's own answer: a plain PUB, or its refusal
            return await super()._send_publish(subject, reply, payload, payload_size, headers)
        command = self._counted(subject, reply, payload, headers)
        if subject.startswith(self.held_subjects):
            self._hold(command)
            return
        await self._send_command(command)
        self._write_soon()

    def _write_soon(self) -> None:
        """Write the buffer once this turn of the event loop is done (what the turn published, in
        one write). nats-py wakes its flusher task for that: a queue, a future and a task step a
        write, ~5 % of the gateway's CPU at one client, where a callback does it with less
        (docs/performance.md, "Publishes written by a callback"). While the socket is backed up,
        the flusher writes as it would (its wait for the socket to drain holds publishers back),
        and while the connection is down the buffer waits for the reconnect, as it did."""
        if not self._write_due:
            self._write_due = True
            asyncio.get_running_loop().call_soon(self._write_pending)

    def _write_pending(self) -> None:
        self._write_due = False
        if self._pending_data_size == 0 or self._flush_queue is None or self.is_closed:
            return
        writer = getattr(self._transport, "_io_writer", None)  # (TCP and TLS; not a websocket)
        if self.is_connected and writer is not None and writer.transport.get_write_buffer_size() == 0:
            self._write_buffer()
        else:
            self._releasing = asyncio.ensure_future(self._flush_pending())

    def publish_held(self, subject: str, reply: str, payload: bytes, headers: dict[str, str]) -> None:
        """`publish` of a record to a held subject, with nothing to await: what nats-py's `publish`
        refuses, this refuses alike (the connection closed or draining, the payload over the
        server's limit, the buffer full while reconnecting)."""
        if self.is_closed:
            raise ConnectionClosedError
        if self.is_draining_pubs:
            raise ConnectionDrainingError
        if len(payload) > self._max_payload:
            raise MaxPayloadError
        if not self.is_connected and len(payload) + self._pending_data_size > self._max_pending_size:
            raise OutboundBufferLimitError
        self._hold(self._counted(subject, reply, payload, headers))

    def _counted(self, subject: str, reply: str, payload: bytes, headers: dict[str, Any]) -> bytes:
        self.stats["out_msgs"] += 1
        self.stats["out_bytes"] += len(payload)
        return hpub_cmd(subject, reply, header_block(headers), payload)

    def _hold(self, command: bytes) -> None:
        self._held.append(command)
        self._held_size += len(command)
        if self._held_size >= self.held_bytes_max:
            self.write_held()
        elif self._release is None:
            self._release = asyncio.get_running_loop().call_later(self.held_for_s, self.write_held)

    def _take_held(self) -> None:
        """What is held, into nats-py's buffer (written by whatever writes it next)."""
        if self._release is not None:
            self._release.cancel()
            self._release = None
        if self._held:
            self._pending += self._held
            self._pending_data_size += self._held_size
            self._held, self._held_size = [], 0

    def write_held(self) -> None:
        """Write what is held now (when its time is up, or for a reader about to wait for it)."""
        self._take_held()
        if self._pending_data_size > 0:
            self._write_soon()

    async def close(self) -> None:
        self._take_held()  # (nats-py writes its buffer as it closes)
        await super().close()

    async def flush(self, timeout: int = DEFAULT_FLUSH_TIMEOUT) -> None:
        self._take_held()
        if self.is_connected and self._pending_data_size > 0:
            self._write_buffer()
        await super().flush(timeout)

    def _write_buffer(self) -> None:
        """nats-py's buffer onto the socket, as its flusher writes it (connected: a transport)."""
        assert self._transport is not None
        self._transport.writelines(self._pending)
        self._pending, self._pending_data_size = [], 0


def write_held(client: Client) -> None:
    """Write what `client` holds for a moment (its request records), where it holds anything."""
    if isinstance(client, OrderedFlushClient):
        client.write_held()


class NatsUnreachable(ConnectionError):
    """The first connection did not succeed in time (a one-shot command, not a service)."""


# How long a one-shot command (an operator CLI verb) waits for its first connection; a service
# waits for NATS as long as it takes.
CLI_CONNECT_S = 10.0
UNREACHABLE_WARN_S = 10.0  # how often a service waiting for its first connection says so


async def connect(
    url: str | None = None,
    name: str = "modelforge",
    first_connect_s: float | None = None,
    nkey_seed: str | None = None,
) -> Connection:
    """`first_connect_s`: give up (NatsUnreachable) if no server answers within it; None: keep
    trying, as a service must. `nkey_seed`: a seed file to sign in with (default $NATS_NKEY_SEED)."""
    connected = asyncio.Event()

    async def on_disconnect() -> None:
        connected.clear()
        if not client.is_closed and not client.is_draining:
            log.warning("nats disconnected (%s)", name)
        connection.dropped()

    async def on_reconnect() -> None:
        connected.set()
        log.info("nats reconnected (%s)", name)

    warned_at = -UNREACHABLE_WARN_S

    async def on_error(exc: Exception) -> None:
        nonlocal warned_at
        now = time.monotonic()
        # Until the first connection, a service waiting for NATS says so (every so often), rather
        # than waiting in silence on a wrong NATS_URL.
        if not connected.is_set() and now - warned_at >= UNREACHABLE_WARN_S:
            warned_at = now
            log.warning("waiting for NATS at %s (%s): %s", ",".join(servers), name, exc)
        else:
            log.debug("nats error (%s): %s", name, exc)

    seed_file = nkey_seed or os.environ.get(NKEY_SEED_ENV) or None
    client = OrderedFlushClient()
    connection = Connection(client, connected)
    servers = (url or nats_url()).split(",")
    opening = client.connect(
        servers=servers,
        name=name,
        tls=nats_tls(),  # None: a TLS server is checked against the system's CAs
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.25,  # type: ignore[arg-type]  # nats-py annotates int, accepts float
        allow_reconnect=True,
        ping_interval=10,
        max_outstanding_pings=3,
        pending_size=64 * 1024 * 1024,
        disconnected_cb=on_disconnect,
        reconnected_cb=on_reconnect,
        error_cb=on_error,
        nkeys_seed=seed_file,
        inbox_prefix=inbox_prefix(seed_file),
    )
    try:
        async with asyncio.timeout(first_connect_s):
            await opening
    except asyncio.CancelledError:
        await client.close()  # a caller that stops waiting leaves no reconnect loop behind
        raise
    except TimeoutError:
        await client.close()
        raise NatsUnreachable(
            f"no NATS server answered at {','.join(servers)} within {first_connect_s:.0f} s: set NATS_URL, "
            "or start the embedded stack (./dev up)"
        ) from None
    connected.set()
    return connection
