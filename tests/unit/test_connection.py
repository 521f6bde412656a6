"""An unreachable NATS is never met in silence: a one-shot command gives up with a clear error, a
service keeps waiting and says so."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import pytest

from eventstore.connection import NatsUnreachable, connect
from modelforge.devstack.processes import free_port


async def test_a_first_connection_nobody_answers_ends_in_a_clear_error() -> None:
    url = f"nats://127.0.0.1:{free_port()}"
    with pytest.raises(NatsUnreachable, match="set NATS_URL"):
        await connect(url, "test", first_connect_s=0.5)


async def test_waiting_for_a_first_connection_is_logged_not_silent() -> None:
    url = f"nats://127.0.0.1:{free_port()}"
    heard = asyncio.Event()

    class Heard(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "waiting for NATS at " + url in record.getMessage():
                heard.set()

    logger = logging.getLogger("modelforge.nats")
    handler, level = Heard(logging.WARNING), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    waiting = asyncio.create_task(connect(url, "test"))  # a service: waits for as long as it takes
    try:
        async with asyncio.timeout(60):  # a bound on a broken build only; it is heard at once
            await heard.wait()
    finally:
        waiting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiting
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert heard.is_set()
