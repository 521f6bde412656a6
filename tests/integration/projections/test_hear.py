"""`projections.wanted.hear`: a listening session's notifications reach its handlers as they
arrive, and the end of the session is raised as a lost one (for the listener to connect again)."""

from __future__ import annotations

import asyncio

import psycopg

from projections.reconnect import lost
from projections.wanted import hear


async def test_notifications_reach_the_handler_and_a_terminated_session_is_raised_as_lost(
    fresh_database: str,
) -> None:
    heard: asyncio.Queue[str] = asyncio.Queue()
    listening = await psycopg.AsyncConnection.connect(fresh_database, autocommit=True)
    listening.add_notify_handler(lambda note: heard.put_nowait(note.payload))
    await listening.execute("LISTEN hear_test")
    hearing = asyncio.create_task(hear(listening))
    try:
        async with await psycopg.AsyncConnection.connect(fresh_database, autocommit=True) as other:
            for payload in ("one", "two"):
                await other.execute("SELECT pg_notify('hear_test', %s)", (payload,))
            async with asyncio.timeout(10):
                assert [await heard.get(), await heard.get()] == ["one", "two"]

            await other.execute("SELECT pg_terminate_backend(%s)", (listening.info.backend_pid,))
            async with asyncio.timeout(10):
                await asyncio.wait({hearing})
        error = hearing.exception()
        assert isinstance(error, psycopg.Error), error
        assert lost(error), error
    finally:
        hearing.cancel()
        await listening.close()
