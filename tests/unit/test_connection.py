"""A one-shot command gives up on an unreachable NATS with a clear error instead of waiting."""

from __future__ import annotations

import pytest

from eventstore.connection import NatsUnreachable, connect
from modelforge.devstack.processes import free_port


async def test_a_first_connection_nobody_answers_ends_in_a_clear_error() -> None:
    url = f"nats://127.0.0.1:{free_port()}"
    with pytest.raises(NatsUnreachable, match="set NATS_URL"):
        await connect(url, "test", first_connect_s=0.5)
