"""Riding out a lost PostgreSQL connection: which errors mean the database went away (rather than
refusing what was sent), and reconnecting with a bounded back-off.

A restart, failover or `pg_terminate_backend` ends a session; sending the same rows again on a new
session succeeds. A data error (a value out of range, a broken constraint, a statement the schema
no longer fits, a row over a size limit) fails the same way every time: that one names its event.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import psycopg

log = logging.getLogger("modelforge.projections.reconnect")
T = TypeVar("T")

# SQLSTATE classes: 22 data exception, 23 integrity constraint violation, 42 syntax error or access
# rule violation, 54 program limit exceeded (e.g. an index row too large): the same input fails again.
DATA_ERROR_CLASSES = frozenset({"22", "23", "42", "54"})
BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 30.0


def refused_data(exc: psycopg.Error) -> bool:
    """The database refused what was sent: the same statement on any connection fails again."""
    return (exc.sqlstate or "")[:2] in DATA_ERROR_CLASSES


def lost(exc: BaseException) -> bool:
    """The session, not the data: the connection went (class 08, 57P01 terminated, closed socket) or
    the server rolled the transaction back (40001 serialization failure, 40P01 deadlock). Nothing
    of the transaction stayed; on a new connection, from the stored checkpoint, it can succeed."""
    return isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError) and not refused_data(exc)


async def reconnect(connect: Callable[[], Awaitable[T]], what: str, stop: asyncio.Event) -> T | None:
    """`connect()` again until it succeeds, waiting BACKOFF_FIRST_S, doubling up to BACKOFF_MAX_S,
    between attempts, each one logged; None once `stop` is set. Errors other than a lost session
    (see `lost`) are raised."""
    delay, attempt = BACKOFF_FIRST_S, 1
    while not stop.is_set():
        log.warning("%s: connecting to PostgreSQL again (attempt %d)", what, attempt)
        try:
            return await connect()
        except psycopg.Error as exc:
            if not lost(exc):
                raise
            log.warning("%s: attempt %d failed (%s); next in %.1f s", what, attempt, exc, delay)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(delay):
                await stop.wait()
        delay, attempt = min(2 * delay, BACKOFF_MAX_S), attempt + 1
    return None
