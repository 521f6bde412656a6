"""A lease's appends when the event log is slow: a grant that lands after its request gave up is
given back, with what it planned still carried out."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator

import pytest

from modelforge.devstack.nats_server import NatsServer
from streams.codes import ServingError
from streams.envelope import new_id
from streams.events import serving as s
from streams.subjects import Aggregate
from tests.integration.gateway.conftest import (
    Stack,
    another_deployment,
    failure_of,
    release_of,
    serve_directly,
)
from tests.support.agents import next_event


@contextlib.contextmanager
def _resumed_afterwards(server: NatsServer) -> Iterator[None]:
    """Whatever the block does, the module's nats-server runs again after it (SIGCONT)."""
    try:
        yield
    finally:
        os.kill(server.pid, signal.SIGCONT)


async def test_a_grant_that_lands_after_its_request_timed_out_is_given_back_and_its_load_still_goes_out(
    stack: Stack, module_nats: NatsServer
) -> None:
    deployment = await another_deployment(stack, "minilm-late", "late")
    request_id = f"late-{new_id()[:6]}"

    async def nats_stopped_once_admitted() -> None:
        # The search has begun but decided nothing yet: its lease and load are appended to a
        # server that cannot answer until the request's deadline has passed.
        os.kill(module_nats.pid, signal.SIGSTOP)

    with _resumed_afterwards(module_nats), pytest.raises(ServingError) as timed_out:
        await serve_directly(
            stack, request_id, ["x"], admitted=nats_stopped_once_admitted, model="late", timeout_s=1.5
        )
    assert (timed_out.value.code, timed_out.value.http_status) == ("REQUEST_TIMEOUT", 504)
    assert "not recorded before the deadline" in timed_out.value.message
    assert (await failure_of(stack, request_id)).code == "REQUEST_TIMEOUT"
    # Once the server resumes the grant lands; the request is gone, so its lease goes back, and the
    # load it booked is still sent: the agent loads the model.
    assert (await release_of(stack, request_id)).outcome == "cancelled"
    loaded = await next_event(
        stack.connection,
        Aggregate.ACCELERATOR,
        f"{stack.node}-cpu0",
        lambda e: isinstance(e, s.ResidencyLoaded) and e.deployment_id == deployment,
    )
    assert loaded.measured_bytes > 0
