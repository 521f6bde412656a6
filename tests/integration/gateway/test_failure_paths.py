"""A request that fails, before or after its lease was granted, is recorded failed with its code, and
any lease it held is given back."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import msgspec
import pytest
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from eventstore.store import ExpectedVersion
from gateway.serving.appends import stage
from gateway.serving.capacity import Grant, release
from gateway.serving.dispatch import invoke
from gateway.serving.outputs import JSON_OUTPUT
from gateway.serving.requests import Served
from streams import subjects
from streams.codes import ServingError
from streams.envelope import new_id
from streams.events import control as c
from streams.events import serving as s
from streams.events.requests import RequestCompleted, RequestFailed
from streams.messages import InvokeReply, QueueDepth
from streams.subjects import Aggregate
from tests.integration.gateway.conftest import (
    PRESSURE_PAST_BUDGET,
    Stack,
    another_deployment,
    books_filled,
    failure_of,
    first_event,
    key_issued,
    lease_held,
    policy_while,
    release_of,
    serve_directly,
)
from tests.support.agents import aggregate_events, next_event, stopped
from tests.support.serving import stream_refusing_messages


async def test_a_deployment_whose_node_changed_hardware_since_its_probe_is_refused_as_stale(
    stack: Stack,
) -> None:
    events = await aggregate_events(stack.connection, Aggregate.NODE, stack.node)
    registered = [e for e in events if isinstance(e, c.NodeRegistered)][-1]
    moved = msgspec.structs.replace(registered, hardware_fingerprint="another-machine")
    headers = {"authorization": f"Bearer {stack.key.key}"}
    async with httpx.AsyncClient(timeout=60) as http:
        seq = await stack.store.append(Aggregate.NODE, stack.node, [moved], ExpectedVersion.ANY)
        assert (await http.get(f"{stack.gateway.url}/readyz", params={"applied": seq})).status_code == 200
        try:
            response = await http.post(
                f"{stack.gateway.url}/v1/embeddings", json={"input": "x"}, headers=headers
            )
        finally:
            seq = await stack.store.append(Aggregate.NODE, stack.node, [registered], ExpectedVersion.ANY)
            assert (await http.get(f"{stack.gateway.url}/readyz", params={"applied": seq})).status_code == 200
    assert response.status_code == 503
    error = response.json()["error"]
    assert error["code"] == "SCHEDULER_STATE_STALE"
    assert "hardware changed" in error["details"]["stale_reason"]
    assert (await failure_of(stack, error["request_id"])).code == "SCHEDULER_STATE_STALE"


async def test_a_decision_whose_waiter_gave_up_does_not_stop_its_accelerators_writer(stack: Stack) -> None:
    assert stack.gateway.replica is not None
    ctx = stack.gateway.replica.edge.ctx
    accelerator = f"{stack.node}-cpu0"
    normal = s.PressureChanged(
        accelerator_id=accelerator, previous="NORMAL", current="NORMAL", utilization=0.0
    )
    async with ctx.live.decision_lock:
        abandoned = stage(ctx, accelerator, [normal])
        waited = stage(ctx, accelerator, [normal])
    abandoned.cancel()  # as when the request awaiting it is cancelled
    async with asyncio.timeout(10):
        assert await waited > 0


class _Heard(logging.Handler):
    """Sets `event` when a record whose message contains `words` is logged."""

    def __init__(self, words: str) -> None:
        super().__init__()
        self.words, self.event = words, asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.words in record.getMessage():
            self.event.set()


async def test_a_lease_release_the_event_log_refuses_for_a_while_is_recorded_once_it_takes_it(
    stack: Stack,
) -> None:
    # A release that fails (no stream leader, a lost connection, a stream refusing) is tried again
    # until recorded: given up at once, the lease stayed on the books until its TTL.
    grant = await lease_held(stack, ttl_s=600)
    assert stack.gateway.replica is not None
    ctx = stack.gateway.replica.edge.ctx
    heard = _Heard("LeaseReleased on")
    logging.getLogger("modelforge.gateway.background").addHandler(heard)
    try:
        async with stream_refusing_messages(stack.connection, subjects.EVENTS_STREAM):
            releasing = asyncio.create_task(release(ctx, grant, "completed"))
            async with asyncio.timeout(30):
                await asyncio.wait(
                    [releasing, asyncio.create_task(heard.event.wait())], return_when="FIRST_COMPLETED"
                )
            assert not releasing.done(), releasing  # refused, and trying again rather than giving up
        async with asyncio.timeout(30):
            await releasing
    finally:
        logging.getLogger("modelforge.gateway.background").removeHandler(heard)
    assert not ctx.live.holds_lease(grant.accelerator_id, grant.lease_id)
    released = await first_event(
        stack,
        subjects.EVENTS_STREAM,
        lambda e: isinstance(e, s.LeaseReleased) and e.lease_id == grant.lease_id,
    )
    assert isinstance(released, s.LeaseReleased)
    assert released.outcome == "completed"


async def test_a_request_served_while_the_request_log_refuses_is_recorded_once_it_takes_it(
    stack: Stack,
) -> None:
    heard = _Heard("RequestCompleted of")
    logging.getLogger("modelforge.gateway.background").addHandler(heard)
    request_id = new_id()
    try:
        async with stream_refusing_messages(stack.connection, subjects.REQUESTS_STREAM):
            await serve_directly(stack, request_id, ["kept in the log"])
            async with asyncio.timeout(30):
                await heard.event.wait()  # its record was refused, and is being tried again
    finally:
        logging.getLogger("modelforge.gateway.background").removeHandler(heard)
    completed = await first_event(
        stack,
        subjects.REQUESTS_STREAM,
        lambda e: isinstance(e, RequestCompleted) and e.request_id == request_id,
    )
    assert isinstance(completed, RequestCompleted)


async def test_a_cold_load_whose_job_cannot_be_sent_is_refused_and_leaves_nothing_loading(
    stack: Stack,
) -> None:
    deployment = await another_deployment(stack, "minilm-unsent", "unsent")
    headers = {"authorization": f"Bearer {stack.key.key}"}
    body = {"input": "load me", "model": "unsent"}
    async with httpx.AsyncClient(timeout=60) as http:
        async with stream_refusing_messages(stack.connection, subjects.WORK_STREAM):
            refused = await http.post(f"{stack.gateway.url}/v1/embeddings", json=body, headers=headers)
        served = await http.post(f"{stack.gateway.url}/v1/embeddings", json=body, headers=headers)
    assert refused.status_code == 503
    assert refused.json()["error"]["code"] == "CAPABILITY_UNAVAILABLE"
    assert "load job could not be sent" in refused.json()["error"]["message"]
    ended = await first_event(
        stack,
        subjects.EVENTS_STREAM,
        lambda e: isinstance(e, s.ResidencyLoadFailed) and e.deployment_id == deployment,
    )
    assert ended.code == "CAPABILITY_UNAVAILABLE"  # type: ignore[attr-defined]
    assert (await release_of(stack, refused.headers["x-request-id"])).outcome == "failed"
    # Nothing was left LOADING: once jobs go through again, the next request loads the model.
    assert served.status_code == 200, served.text
    assert served.headers["x-mf-deployment"] == deployment


async def test_a_cold_load_the_agent_failed_is_not_sent_to_it_again_at_once(stack: Stack) -> None:
    deployment = await another_deployment(stack, "minilm-broken", "broken")
    (stack.root / "minilm-broken" / "model.onnx").unlink()  # the agent's check of the files fails
    headers = {"authorization": f"Bearer {stack.key.key}"}
    body = {"input": "load me", "model": "broken"}
    async with httpx.AsyncClient(timeout=60) as http:
        failed = await http.post(f"{stack.gateway.url}/v1/embeddings", json=body, headers=headers)
        again = await http.post(f"{stack.gateway.url}/v1/embeddings", json=body, headers=headers)
    assert failed.status_code == 503, failed.text
    assert again.status_code == 503
    assert again.json()["error"]["code"] == "RESIDENCY_LOAD_FAILED"
    assert "RESIDENCY_LOAD_FAILED" in again.json()["error"]["details"]["reason_codes"]
    events = await aggregate_events(stack.connection, Aggregate.ACCELERATOR, f"{stack.node}-cpu0")
    loads = [e for e in events if isinstance(e, s.ResidencyLoadRequested) and e.deployment_id == deployment]
    assert len(loads) == 1  # the second request was refused without sending the node the same load


@contextlib.asynccontextmanager
async def _device_held(stack: Stack) -> AsyncIterator[Callable[[], Awaitable[int]]]:
    """While the block runs, leases hold the stack's device full, so requests wait in line for them,
    and the reader it yields gives this gateway's next announced line length; after the block the
    leases are released and what the gateway began meanwhile has settled."""
    assert stack.gateway.replica is not None
    ctx = stack.gateway.replica.edge.ctx
    accelerator = f"{stack.node}-cpu0"
    blockers, released = books_filled(stack, accelerator)
    depths = await stack.connection.client.subscribe(subjects.queue_depth_subject(ctx.gateway_id))

    async def depth() -> int:
        return msgspec.json.decode((await depths.next_msg(timeout=20)).data, type=QueueDepth).depth

    # The device held full to its budget is not under test: pressure refuses cold loads only past it.
    async with policy_while(stack, PRESSURE_PAST_BUDGET):
        seq = await stack.store.append(Aggregate.ACCELERATOR, accelerator, blockers, ExpectedVersion.ANY)
        try:
            assert await ctx.live.wait_applied(seq, timeout=10)
            yield depth
        finally:
            await depths.unsubscribe()
            seq = await stack.store.append(Aggregate.ACCELERATOR, accelerator, released, ExpectedVersion.ANY)
        assert await ctx.live.wait_applied(seq, timeout=10)
        await stack.gateway.settled()  # had a request stayed in line, it would be leased by now


async def test_a_request_its_client_limits_refuse_while_it_waits_for_capacity_leaves_the_line(
    stack: Stack,
) -> None:
    assert stack.gateway.replica is not None
    ctx = stack.gateway.replica.edge.ctx
    request_id = f"refused-in-line-{new_id()[:6]}"
    async with _device_held(stack) as depth:

        async def refused_once_in_line() -> None:  # the limits' answer arrives while it waits
            while await depth() < 1:
                pass
            raise ServingError("RATE_LIMITED", "over the rate")

        with pytest.raises(ServingError, match="over the rate"):
            await serve_directly(stack, request_id, ["x"], admitted=refused_once_in_line)
        async with asyncio.timeout(20):  # the line empties: the search stopped
            while await depth():
                pass
        assert ctx.queued == 0
    events = await aggregate_events(stack.connection, Aggregate.ACCELERATOR, f"{stack.node}-cpu0")
    assert not [e for e in events if isinstance(e, s.LeaseGranted) and e.request_id == request_id]


async def test_a_cold_load_whose_request_left_while_it_was_being_booked_still_loads(stack: Stack) -> None:
    # no cap of its own: the search stages the load at once, with no slot to take before it
    deployment = await another_deployment(stack, "minilm-left", "left", caps=s.DeploymentCaps())
    request_id = f"left-{new_id()[:6]}"

    async def refused_at_once() -> None:
        await asyncio.sleep(0)  # (the search decides and stages the load first)
        raise ServingError("RATE_LIMITED", "over the rate")

    with pytest.raises(ServingError, match="over the rate"):
        await serve_directly(stack, request_id, ["x"], admitted=refused_at_once, model="left")
    accelerator = f"{stack.node}-cpu0"
    loaded = await next_event(
        stack.connection,
        Aggregate.ACCELERATOR,
        accelerator,
        lambda e: isinstance(e, s.ResidencyLoaded) and e.deployment_id == deployment,
    )
    assert loaded.measured_bytes > 0  # the load job went out although its request had gone
    assert (await release_of(stack, request_id)).outcome == "cancelled"


async def test_an_output_the_caller_cannot_render_fails_the_request_as_invalid_output(stack: Stack) -> None:
    request_id = f"unreadable-{new_id()[:8]}"

    def render(served: Served[bytes]) -> object:
        raise IndexError("a rerank index past the documents, say")

    with pytest.raises(ServingError) as refused:
        await serve_directly(stack, request_id, ["x"], render)
    assert refused.value.code == "INVALID_OUTPUT"
    assert (await failure_of(stack, request_id)).code == "INVALID_OUTPUT"


async def _resident_worker(stack: Stack) -> int:
    """The pid of the worker serving the stack's deployment, loaded by a short request if it was not."""
    await serve_directly(stack, f"warm-{new_id()[:8]}", ["warm"])
    return stack.agent.workers()[stack.deployment_id]


async def test_a_request_cancelled_while_its_model_runs_gives_its_lease_back_and_is_recorded(
    stack: Stack,
) -> None:
    request_id = f"cancelled-{new_id()[:8]}"
    # The worker is stopped, so the model is still running the request when it is cancelled,
    # however fast or slow the machine (and nothing is left running for the next test).
    with stopped(await _resident_worker(stack)):
        serving = asyncio.create_task(serve_directly(stack, request_id, ["the quick brown fox"]))
        await first_event(  # its lease granted: the model is running it
            stack,
            subjects.EVENTS_STREAM,
            lambda e: isinstance(e, s.LeaseGranted) and e.request_id == request_id,
        )
        assert not serving.done()
        serving.cancel()  # as a shutdown does
        with pytest.raises(asyncio.CancelledError):
            await serving
    assert (await release_of(stack, request_id)).outcome == "cancelled"
    assert (await failure_of(stack, request_id)).code == "REQUEST_CANCELLED"


async def test_a_request_cut_off_by_its_agents_reconnect_runs_again_on_the_only_copy(stack: Stack) -> None:
    # The agent that reports a drop of its NATS connection is connected again: where no other copy
    # may take the request, it runs once more on the same one rather than failing 503.
    assert stack.gateway.replica is not None
    live = stack.gateway.replica.edge.ctx.live
    request_id = f"cut-off-{new_id()[:8]}"
    invokes = await stack.connection.client.subscribe(
        subjects.invoke_subject(stack.node, stack.deployment_id)
    )
    await stack.connection.client.flush()  # the server holds the copy's interest before the request
    with stopped(await _resident_worker(stack)):  # the model is still running it when the drop is heard
        serving = asyncio.create_task(serve_directly(stack, request_id, ["cut off"]))
        try:
            while request_id.encode() not in (await invokes.next_msg(timeout=30)).data:
                pass  # (another request's invoke)
            latest = live.telemetry[f"{stack.node}-cpu0"]
            live.apply_telemetry(msgspec.structs.replace(latest, reconnects=latest.reconnects + 1))
            while request_id.encode() not in (await invokes.next_msg(timeout=30)).data:
                pass  # its invoke once more, on the same node: no other has a copy
        finally:
            await invokes.unsubscribe()
    served = await asyncio.wait_for(serving, 60)
    assert served.deployment_id == stack.deployment_id
    assert (await release_of(stack, request_id)).outcome == "failed"  # the cut-off run's lease
    ended = await first_event(
        stack,
        subjects.REQUESTS_STREAM,
        lambda e: isinstance(e, RequestCompleted | RequestFailed) and e.request_id == request_id,
    )
    assert isinstance(ended, RequestCompleted)


async def _hang_up(call: asyncio.Future[httpx.Response]) -> None:
    """The client gives up on `call`: its connection closes."""
    call.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await call


async def test_a_request_whose_client_disconnects_while_its_model_runs_keeps_its_lease_until_the_worker_answers(
    stack: Stack,
) -> None:
    # The worker's memory is in use until it answers: the books must not free it earlier.
    gone = await key_issued(stack, f"left-{new_id()[:6]}", ["rag.embedding@1"])
    headers = {"authorization": f"Bearer {gone.key}", "x-request-timeout-ms": "60000"}
    text = f"left behind {new_id()}"  # marks its invoke
    # A copy of each invoke sent to the agent (outside its queue group): the model is running.
    invokes = await stack.connection.client.subscribe(
        subjects.invoke_subject(stack.node, stack.deployment_id)
    )
    await stack.connection.client.flush()  # the server holds the copy's interest before the request
    async with httpx.AsyncClient(timeout=60) as http:
        # The worker is stopped, so the model is still running the request when its client leaves,
        # however fast or slow the machine.
        with stopped(await _resident_worker(stack)):
            running = asyncio.ensure_future(
                http.post(f"{stack.gateway.url}/v1/embeddings", json={"input": [text]}, headers=headers)
            )
            try:
                while text.encode() not in (await invokes.next_msg(timeout=30)).data:
                    pass  # (another request's invoke)
            finally:
                await invokes.unsubscribe()
            await _hang_up(running)
            # A later request's round trip through the gateway's event loop, which has seen the hang-up.
            assert (await http.get(f"{stack.gateway.url}/healthz")).status_code == 200
    lease = await first_event(
        stack,
        subjects.EVENTS_STREAM,
        lambda e: isinstance(e, s.LeaseGranted) and e.client_id == gone.client_id,
    )
    assert isinstance(lease, s.LeaseGranted)
    ended = await first_event(
        stack,
        subjects.REQUESTS_STREAM,
        lambda e: isinstance(e, RequestCompleted | RequestFailed) and e.client_id == gone.client_id,
    )
    assert isinstance(ended, RequestCompleted)
    assert (await release_of(stack, lease.request_id)).outcome == "completed"


async def test_a_deployment_whose_worker_process_died_is_loaded_again_by_the_next_request(
    stack: Stack,
) -> None:
    assert stack.gateway.replica is not None
    live = stack.gateway.replica.edge.ctx.live

    def resident() -> bool:
        books = live.accelerators.get(f"{stack.node}-cpu0")
        return books is not None and any(r.deployment_id == stack.deployment_id for r in books.residents)

    headers = {"authorization": f"Bearer {stack.key.key}"}
    async with httpx.AsyncClient(timeout=60) as http:
        warm = await http.post(f"{stack.gateway.url}/v1/embeddings", json={"input": "warm"}, headers=headers)
        assert warm.status_code == 200
        crashed = stack.agent.workers()[stack.deployment_id]
        os.kill(crashed, signal.SIGKILL)  # as a runtime crash or the OOM killer would
        assert await live.wait_for(lambda: not resident(), 30)  # the agent said so; the books agree
        again = await http.post(
            f"{stack.gateway.url}/v1/embeddings", json={"input": "again"}, headers=headers
        )

    assert again.status_code == 200, again.text
    assert resident()
    assert stack.agent.workers()[stack.deployment_id] != crashed


async def test_a_request_whose_worker_is_killed_mid_invoke_gets_a_503_and_the_next_request_reloads_it(
    stack: Stack,
) -> None:
    headers = {"authorization": f"Bearer {stack.key.key}"}
    url = f"{stack.gateway.url}/v1/embeddings"
    texts = [f"{i} " + "a long passage to embed, " * 40 for i in range(16)]  # a second or so of inference
    async with httpx.AsyncClient(timeout=60) as http:
        assert (await http.post(url, json={"input": "warm"}, headers=headers)).status_code == 200
        crashed = stack.agent.workers()[stack.deployment_id]
        # A plain subscriber sees each invoke the agent's queue group gets: the moment to kill.
        invokes = await stack.connection.client.subscribe(
            subjects.invoke_subject(stack.node, stack.deployment_id)
        )
        await stack.connection.client.flush()  # the server holds its interest before the request
        running = asyncio.ensure_future(http.post(url, json={"input": texts}, headers=headers))
        try:
            while len((await invokes.next_msg(timeout=30)).data) < 10_000:
                pass  # (another test's small request)
        finally:
            await invokes.unsubscribe()
        os.kill(crashed, signal.SIGKILL)  # as a runtime crash or the OOM killer would
        lost = await running
        again = await http.post(url, json={"input": "again"}, headers=headers)

    # Not tried again (the input may be what crashed the runtime): a 503 that says what happened.
    assert lost.status_code == 503, lost.text
    assert lost.json()["error"]["code"] == "INFERENCE_FAILED"
    assert "died (killed by SIGKILL)" in lost.json()["error"]["message"]
    assert again.status_code == 200, again.text
    assert stack.agent.running
    assert stack.agent.workers()[stack.deployment_id] != crashed


# It kills the stack's agent: the tests after it need no model to run.
async def _left_the_line(stack: Stack, depth: Callable[[], Awaitable[int]], client_id: str) -> None:
    """The client's request, which waited in line when its client left, is recorded cancelled,
    the line empties, and it never got a lease."""
    failed = await first_event(
        stack,
        subjects.REQUESTS_STREAM,
        lambda e: isinstance(e, RequestFailed) and e.client_id == client_id,
    )
    async with asyncio.timeout(20):
        while await depth():
            pass
    assert isinstance(failed, RequestFailed)
    assert failed.code == "REQUEST_CANCELLED"
    assert stack.gateway.replica is not None
    assert stack.gateway.replica.edge.ctx.queued == 0
    events = await aggregate_events(stack.connection, Aggregate.ACCELERATOR, f"{stack.node}-cpu0")
    assert not [e for e in events if isinstance(e, s.LeaseGranted) and e.client_id == client_id]


async def test_a_request_whose_client_disconnects_while_it_waits_for_capacity_leaves_the_line(
    stack: Stack,
) -> None:
    gone = await key_issued(stack, f"gone-{new_id()[:6]}", ["rag.embedding@1"])
    # (its deadline, 10 s, is what would end its wait if nothing noticed the client leave)
    headers = {"authorization": f"Bearer {gone.key}", "x-request-timeout-ms": "10000"}
    async with _device_held(stack) as depth, httpx.AsyncClient(timeout=60) as http:
        waiting = asyncio.ensure_future(
            http.post(f"{stack.gateway.url}/v1/embeddings", json={"input": "x"}, headers=headers)
        )
        while await depth() < 1:
            pass
        await _hang_up(waiting)
        await _left_the_line(stack, depth, gone.client_id)


async def test_a_request_with_another_pipelined_behind_it_leaves_the_line_when_its_client_disconnects(
    stack: Stack,
) -> None:
    # HTTP/1.1 pipelining: the client sends its next request before the first is answered, then
    # hangs up. The first, waiting in line, must notice as it would alone (and the second, never
    # started, records nothing).
    gone = await key_issued(stack, f"piped-{new_id()[:6]}", ["rag.embedding@1"])
    body = b'{"input": "x"}'
    one = (
        b"POST /v1/embeddings HTTP/1.1\r\nhost: gateway\r\ncontent-type: application/json\r\n"
        b"authorization: Bearer " + gone.key.encode() + b"\r\n"
        b"x-request-timeout-ms: 10000\r\ncontent-length: %d\r\n\r\n" % len(body) + body
    )
    host, port = stack.gateway.url.removeprefix("http://").split(":")
    async with _device_held(stack) as depth:
        _, writer = await asyncio.open_connection(host, int(port))
        writer.write(one + one)
        await writer.drain()
        while await depth() < 1:
            pass
        writer.close()  # the client gives up on both
        await writer.wait_closed()
        await _left_the_line(stack, depth, gone.client_id)


async def test_an_invoke_that_finds_no_responder_is_sent_again_while_its_agent_reconnects(
    stack: Stack,
) -> None:
    # An agent between two NATS connections answers nothing for a moment: its invoke is asked
    # again rather than failed as unreachable (here the "agent" subscribes 0.3 s after the first try).
    assert stack.gateway.replica is not None
    ctx = stack.gateway.replica.edge.ctx
    node, deployment = f"reconnecting-{new_id()[:6]}", "reconnecting-copy"
    answer = InvokeReply(ok=True, result=msgspec.Raw(b'{"data": []}'))

    async def reply(msg: Msg) -> None:
        await msg.respond(msgspec.json.encode(answer))

    async def subscribe_late() -> Subscription:
        await asyncio.sleep(0.3)  # the agent's reconnect, as it were
        subscription = await stack.connection.client.subscribe(
            subjects.invoke_subject(node, deployment), cb=reply
        )
        await stack.connection.client.flush()
        return subscription

    late = asyncio.create_task(subscribe_late())
    grant = Grant(
        lease_id=new_id(),
        accelerator_id=f"{node}-cpu0",
        node_id=node,
        deployment_id=deployment,
        cold=False,
        fingerprint="f",
    )
    try:
        invoked = await invoke(
            ctx, grant, "rag.embedding@1", new_id(), b'{"input": ["x"]}', time.time() + 10, JSON_OUTPUT
        )
    finally:
        await (await late).unsubscribe()
    assert invoked.result == b'{"data": []}'


async def test_a_request_whose_agent_died_fails_gives_its_lease_back_and_is_recorded_failed(
    stack: Stack,
) -> None:
    # Last in this module: it leaves the stack's agent dead, and its node soon counts as lost, so a
    # test after it could not wait in line for that node's device.
    headers = {"authorization": f"Bearer {stack.key.key}"}
    async with httpx.AsyncClient(timeout=60) as http:
        warm = await http.post(f"{stack.gateway.url}/v1/embeddings", json={"input": "warm"}, headers=headers)
        assert warm.status_code == 200  # MiniLM is resident on the agent's accelerator
        stack.agent.kill()
        # nats-server drops the dead agent's interest as soon as it sees the socket close; should the
        # call beat that, it goes unanswered and times out instead. Either way it fails after its lease.
        response = await http.post(
            f"{stack.gateway.url}/v1/embeddings",
            json={"input": "x"},
            headers={**headers, "x-request-timeout-ms": "3000"},
        )
    code = response.json()["error"]["code"]
    assert (response.status_code, code) in {(503, "CAPABILITY_UNAVAILABLE"), (504, "REQUEST_TIMEOUT")}
    request_id = response.headers["x-request-id"]

    assert (await failure_of(stack, request_id)).code == code
    assert (await release_of(stack, request_id)).outcome == "failed"
