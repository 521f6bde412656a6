"""Those watching a connection for a drop are told once, and only while they watch."""

from __future__ import annotations

import asyncio

from nats.aio.client import Client

from eventstore.connection import Connection


def test_a_drop_tells_each_watcher_once() -> None:
    connection, told = Connection(Client(), asyncio.Event()), list[str]()
    connection.watch_drop("a", lambda: told.append("a"))
    connection.watch_drop("b", lambda: told.append("b"))
    connection.dropped()
    connection.dropped()
    assert sorted(told) == ["a", "b"]


def test_a_watcher_that_stopped_watching_is_not_told() -> None:
    connection, told = Connection(Client(), asyncio.Event()), list[str]()
    connection.watch_drop("a", lambda: told.append("a"))
    connection.unwatch_drop("a")
    connection.dropped()
    assert told == []
