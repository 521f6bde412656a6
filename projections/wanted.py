"""A reader's ask that the projector commit now.

Under steady traffic the projector commits at most once per commit interval (a transaction costs
far more than the events in it: docs/performance.md, "At a trickle"), so the read model may be up to
that interval behind. A reader that waits for a sequence (read-your-writes, `projections.wait`)
need not wait that long: it asks, with a notification on `WANT_CHANNEL` ("schema:stream:seq"), and
the projector of that stream stops waiting out the interval until the asked sequence is committed.
An ask is a hint: one nobody hears (no projector running) leaves the read to wait for the interval,
as before. Asks sent while the listener's session was lost are taken as asked for everything
(`Asks.missed`) once it listens again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from collections.abc import Callable, Collection, Mapping
from typing import Any

import psycopg
from psycopg import sql

from projections.reconnect import lost, reconnect

log = logging.getLogger("modelforge.projections.wanted")
WANT_CHANNEL = "modelforge_projection_wanted"
ASK_LAPSES_S = 60.0


async def ask(conn: psycopg.AsyncConnection[Any], schema: str, stream: str, seq: int) -> None:
    """Ask the projector of `stream` in `schema` to commit through `seq` without waiting."""
    await conn.execute("SELECT pg_notify(%s, %s)", (WANT_CHANNEL, f"{schema}:{stream}:{seq}"))


class Asks:
    """The furthest sequence readers asked for, per stream this projector applies; `on_ask` is
    called for each ask that reaches further. An ask lapses after `ASK_LAPSES_S` (longer than a
    read waits), so one for a sequence that never comes does not keep the projector from batching."""

    def __init__(
        self, schema: str, streams: Collection[str], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.schema, self.streams, self._clock = schema, frozenset(streams), clock
        self.through: dict[str, tuple[int, float]] = {}  # stream -> (sequence, when the ask lapses)
        self.on_ask: Callable[[], None] = lambda: None

    def heard(self, payload: str) -> None:
        schema, _, rest = payload.partition(":")
        stream, _, seq = rest.rpartition(":")
        if schema != self.schema or stream not in self.streams or not seq.isdigit():
            return
        now = self._clock()
        asked, lapses = self.through.get(stream, (0, now))
        if int(seq) > (asked if lapses > now else 0):  # further than the ask standing, if any
            self.through[stream] = (int(seq), now + ASK_LAPSES_S)
            self.on_ask()

    def missed(self) -> None:
        """Asks may have gone unheard (the listener's session was lost and opened again): as if
        each stream had been asked through all that comes within `ASK_LAPSES_S`, so a reader that
        asked meanwhile waits for no lengthened interval (up to a minute) after a database restart."""
        lapses = self._clock() + ASK_LAPSES_S
        for stream in self.streams:
            self.through[stream] = (sys.maxsize, lapses)
        self.on_ask()

    def pending(self, submitted: Mapping[str, int]) -> bool:
        """Whether a reader waits for an event not yet in a batch (`submitted`: per stream, the
        checkpoint once every batch handed to the writer commits)."""
        now = self._clock()
        return any(
            seq > submitted.get(stream, 0) and lapses > now for stream, (seq, lapses) in self.through.items()
        )


async def listen(database_url: str, asks: Asks, stop: asyncio.Event) -> None:
    """Hear asks on a session of its own until `stop` is set; a lost session is opened again. Asks
    are hints: this never stops the projector (a refused session is logged and hearing ends)."""
    what = "projector's ask listener"

    def note(notify: psycopg.Notify) -> None:
        asks.heard(notify.payload)

    async def listening() -> psycopg.AsyncConnection[Any]:
        conn = await psycopg.AsyncConnection.connect(database_url, autocommit=True)
        conn.add_notify_handler(note)  # before LISTEN: an ask that arrives with its reply is heard too
        await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(WANT_CHANNEL)))
        return conn

    conn: psycopg.AsyncConnection[Any] | None = None
    try:
        while not stop.is_set():
            try:
                conn = conn or await listening()
                await hear(conn)
            except psycopg.Error as exc:
                if not lost(exc):
                    log.error("%s stopped (%s): reads wait for the commit interval", what, exc)
                    return
                log.warning("%s lost its database session (%s)", what, exc)
            if conn is not None:
                await conn.close()
            conn = await reconnect(listening, what, stop)
            asks.missed()
    finally:
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                await conn.close()


async def hear(conn: psycopg.AsyncConnection[Any]) -> None:
    """Hand the notifications `conn` receives to its notify handlers until its session ends (raised
    as psycopg's error). The event loop wakes only when the server sends something: psycopg's
    `notifies()` also wakes every 0.1 s (its wait interval, for Ctrl-C), ten times a second for each
    idle listener, which was most of an idle projector worker's CPU (docs/performance.md, "sixth
    session"). `conn` must do nothing else meanwhile."""
    loop = asyncio.get_running_loop()
    pgconn, handle = conn.pgconn, conn.pgconn.notify_handler
    ended: asyncio.Future[None] = loop.create_future()
    fd = pgconn.socket
    watched = [True]

    def unwatch() -> None:
        if watched[0]:
            watched[0] = False
            loop.remove_reader(fd)

    def readable() -> None:
        try:
            pgconn.consume_input()  # raises once the server closed the session
        except psycopg.Error as exc:
            # libpq has closed the socket by now: the next one opened (another session's) may get
            # its number before this task resumes, and must not find this reader on it.
            unwatch()
            if not ended.done():
                ended.set_exception(exc)
            return
        while (notify := pgconn.notifies()) is not None:
            if handle is not None:
                handle(notify)  # psycopg's: a `psycopg.Notify` to each of `conn`'s notify handlers

    loop.add_reader(fd, readable)
    try:
        readable()  # whatever arrived before the reader was added
        await ended
    finally:
        unwatch()
