"""A node whose agent stops answering is declared lost once, its books are reconciled to cold, and a
request in flight to it ends when that happens (tried once more elsewhere) instead of at its
deadline. A node whose agent's connection is gone is declared lost for that, found by asking it
(NATS's no responders), before its silence could count."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import httpx
import msgspec
import pytest

from gateway.process import STANDBY_LEASES_ENV
from gateway.serving.context import ServingContext
from gateway.serving.keeper import upkeep_once
from gateway.serving.node_loss import GONE_REASON
from gateway.serving.standby import keep_standby
from modelforge.devstack.nats_server import NatsServer
from streams import subjects
from streams.events import control as c
from streams.events import serving as s
from streams.events.requests import RequestFailed
from streams.subjects import Aggregate
from tests.integration.gateway.conftest import one_model_stack
from tests.integration.gateway.residents import holding_standby
from tests.support.agents import MINILM, aggregate_events
from tests.support.fleet_events import StoredEvent, last_sequence, stored_until
from tests.support.serving import InProcessGateway, events_until


@pytest.mark.parametrize("slots", [0, 2], ids=["its own lease", "a standby slot"])
async def test_a_request_in_flight_to_a_node_that_stops_answering_ends_when_the_node_is_declared_lost(
    module_nats: NatsServer, minilm_root: Path, scratch: Path, monkeypatch: pytest.MonkeyPatch, slots: int
) -> None:
    monkeypatch.setenv(STANDBY_LEASES_ENV, str(slots))  # a request under a slot holds no lease of its own
    async with one_model_stack(module_nats.url, minilm_root, scratch, MINILM, "rag.embedding@1") as stack:
        other = InProcessGateway()  # a second replica: the node is declared lost once all the same
        await other.start(module_nats.url)
        headers = {"authorization": f"Bearer {stack.key}"}
        try:
            async with httpx.AsyncClient(timeout=120) as http:
                warm = await http.post(f"{stack.url}/v1/embeddings", json={"input": "warm"}, headers=headers)
                assert warm.status_code == 200  # resident on the node's accelerator
                assert stack.gateway.replica is not None
                if slots:
                    await holding_standby(stack.gateway.replica.edge.ctx)
                assert stack.agent.process is not None
                stack.agent.process.send_signal(signal.SIGSTOP)  # hung: connected, answering nothing
                try:
                    response = await http.post(
                        f"{stack.url}/v1/embeddings",
                        json={"input": "in flight"},
                        headers={**headers, "x-request-timeout-ms": "90000"},
                    )
                finally:
                    stack.agent.process.send_signal(signal.SIGCONT)
        finally:
            await other.stop()
        # Tried again after the loss with nowhere else to go: refused as unavailable, not timed out.
        assert response.status_code == 503, response.text
        assert response.json()["error"]["code"] != "REQUEST_TIMEOUT"
        request_id = response.headers["x-request-id"]
        failed = await events_until(
            stack.connection,
            subjects.REQUESTS_STREAM,
            lambda e: isinstance(e, RequestFailed) and e.request_id == request_id,
        )
        assert isinstance(failed[-1], RequestFailed)
        node_events = await aggregate_events(stack.connection, Aggregate.NODE, stack.node)
        assert len([e for e in node_events if isinstance(e, c.NodeLost)]) == 1  # two replicas, once
        accelerator = await aggregate_events(stack.connection, Aggregate.ACCELERATOR, f"{stack.node}-cpu0")
        reconciled = [e for e in accelerator if isinstance(e, s.ResidencyReconciled)][-1]
        assert reconciled.held == ()
        assert reconciled.dropped
        granted = {e.lease_id for e in accelerator if isinstance(e, s.LeaseGranted)}
        ended = {e.lease_id for e in accelerator if isinstance(e, s.LeaseReleased | s.LeaseExpired)}
        assert stack.gateway.replica is not None
        assert not stack.gateway.replica.edge.ctx.live.accelerators[f"{stack.node}-cpu0"].leases
        assert granted - ended  # the in-flight lease ended with the reconciliation, not by a release


async def carrying(ctx: ServingContext, lease_id: str) -> None:
    """Once a request runs under a slot of the standby lease."""
    for _ in range(200):  # (the slot is taken as the request is served: nothing to wait on)
        assert ctx.standby is not None
        if ctx.standby.in_use.get(lease_id, 0):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"no request took a slot of {lease_id}")


async def test_a_standby_lease_carrying_a_request_is_kept_while_its_node_is_silent_until_its_loss(
    module_nats: NatsServer, minilm_root: Path, scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(STANDBY_LEASES_ENV, "2")
    async with one_model_stack(module_nats.url, minilm_root, scratch, MINILM, "rag.embedding@1") as stack:
        headers = {"authorization": f"Bearer {stack.key}"}
        async with httpx.AsyncClient(timeout=120) as http:
            warm = await http.post(f"{stack.url}/v1/embeddings", json={"input": "warm"}, headers=headers)
            assert warm.status_code == 200  # resident on the node's accelerator
            assert stack.gateway.replica is not None
            assert stack.agent.process is not None
            ctx = stack.gateway.replica.edge.ctx
            lease_id = await holding_standby(ctx)
            stack.agent.process.send_signal(signal.SIGSTOP)  # hung: connected, answering nothing
            try:
                in_flight = asyncio.ensure_future(
                    http.post(
                        f"{stack.url}/v1/embeddings",
                        json={"input": "in flight"},
                        headers={**headers, "x-request-timeout-ms": "90000"},
                    )
                )
                await carrying(ctx, lease_id)
                # The node silent in this replica's view (as it will be within seconds), and the
                # standby upkeep's round then, before the node is declared lost.
                accelerator = f"{stack.node}-cpu0"
                heard = ctx.live.telemetry[accelerator]
                ctx.live.apply_telemetry(
                    msgspec.structs.replace(heard, observed_at_unix_ms=heard.observed_at_unix_ms - 3_600_000)
                )
                await keep_standby(ctx, time.time())
                assert ctx.live.holds_lease(accelerator, lease_id)  # not let go under its request
                response = await in_flight
            finally:
                stack.agent.process.send_signal(signal.SIGCONT)
        # Ended by the node's loss, which took the lease off the books, not at its deadline.
        assert response.status_code == 503, response.text
        assert response.json()["error"]["code"] != "REQUEST_TIMEOUT"


async def test_a_node_this_gateway_has_not_heard_from_lately_but_that_published_is_not_declared_lost(
    module_nats: NatsServer, minilm_root: Path, scratch: Path
) -> None:
    async with one_model_stack(module_nats.url, minilm_root, scratch, MINILM, "rag.embedding@1") as stack:
        async with httpx.AsyncClient(timeout=120) as http:
            warm = await http.post(
                f"{stack.url}/v1/embeddings",
                json={"input": "warm"},
                headers={"authorization": f"Bearer {stack.key}"},
            )
        assert warm.status_code == 200  # resident: a node holding something is watched for loss
        assert stack.gateway.replica is not None
        ctx = stack.gateway.replica.edge.ctx
        accelerator = f"{stack.node}-cpu0"
        heard = ctx.live.telemetry[accelerator]
        # This replica's view as when it falls behind its telemetry (a starved event loop, its
        # follower made again): the node's last sample an hour old, though the node kept publishing.
        ctx.live.apply_telemetry(
            msgspec.structs.replace(heard, observed_at_unix_ms=heard.observed_at_unix_ms - 3_600_000)
        )
        await upkeep_once(ctx)  # (a NodeLost it decided would be appended by now)
        node_events = await aggregate_events(stack.connection, Aggregate.NODE, stack.node)
        assert not [e for e in node_events if isinstance(e, c.NodeLost)]
        # What the node published is this replica's view again.
        assert ctx.live.telemetry[accelerator].observed_at_unix_ms >= heard.observed_at_unix_ms


async def test_a_node_whose_agent_is_killed_with_a_request_in_flight_is_lost_for_its_closed_connection(
    module_nats: NatsServer, minilm_root: Path, scratch: Path
) -> None:
    async with one_model_stack(module_nats.url, minilm_root, scratch, MINILM, "rag.embedding@1") as stack:
        headers = {"authorization": f"Bearer {stack.key}"}
        async with httpx.AsyncClient(timeout=120) as http:
            warm = await http.post(f"{stack.url}/v1/embeddings", json={"input": "warm"}, headers=headers)
            assert warm.status_code == 200  # resident on the node's accelerator
            assert stack.agent.process is not None
            since = await last_sequence(stack.connection, subjects.EVENTS_STREAM) + 1
            # Stopped first, so the request is surely in flight to it when it dies. Asked while
            # stopped, the agent is still connected and answers nothing: that proves nothing.
            stack.agent.process.send_signal(signal.SIGSTOP)
            in_flight = asyncio.ensure_future(
                http.post(
                    f"{stack.url}/v1/embeddings",
                    json={"input": "in flight"},
                    headers={**headers, "x-request-timeout-ms": "90000"},
                )
            )

            def granted(stored: StoredEvent) -> bool:
                return isinstance(stored.event, s.LeaseGranted)

            await stored_until(stack.connection, subjects.EVENTS_STREAM, since, granted)
            stack.agent.process.kill()  # its connection closes with it
            response = await in_flight

            def lost(stored: StoredEvent) -> bool:
                return isinstance(stored.event, c.NodeLost)

            events = await stored_until(stack.connection, subjects.EVENTS_STREAM, since, lost)
        assert response.status_code == 503, response.text  # tried again with nowhere else to go
        assert response.json()["error"]["code"] != "REQUEST_TIMEOUT"
        assert isinstance(events[-1].event, c.NodeLost)
        assert events[-1].event.reason == GONE_REASON  # asked, not waited out
