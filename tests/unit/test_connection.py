"""An unreachable NATS is never met in silence: a one-shot command gives up with a clear error, a
service keeps waiting and says so."""

from __future__ import annotations

import logging

import pytest

from eventstore.connection import NatsUnreachable, connect
from modelforge.devstack.processes import free_port


async def test_a_first_connection_nobody_answers_ends_in_a_clear_error() -> None:
    url = f"nats://127.0.0.1:{free_port()}"
    with pytest.raises(NatsUnreachable, match="set NATS_URL"):
        await connect(url, "test", first_connect_s=0.5)


async def test_waiting_for_a_first_connection_is_logged_not_silent(caplog: pytest.LogCaptureFixture) -> None:
    url = f"nats://127.0.0.1:{free_port()}"
    with caplog.at_level(logging.WARNING, logger="modelforge.nats"), pytest.raises(NatsUnreachable):
        await connect(url, "test", first_connect_s=0.5)
    assert any("waiting for NATS at " + url in record.getMessage() for record in caplog.records)
