"""A request's W3C trace, from the client's `traceparent` through the gateway, the NATS headers and
the agent to its worker, as a real OTLP/HTTP receiver gets the spans each process exports."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import msgspec
import pytest

from modelforge.devstack.nats_server import NatsServer
from streams import subjects
from streams.events.requests import RequestCompleted
from tests.integration.gateway.conftest import ProcessStack, process_stack
from tests.support.otlp import OtlpReceiver, Span
from tests.support.serving import events_until

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{CALLER_SPAN}-01"


class Traced(msgspec.Struct):
    stack: ProcessStack
    receiver: OtlpReceiver


@pytest.fixture(scope="module")
async def traced(module_nats: NatsServer, minilm_root: Path, scratch: Path) -> AsyncIterator[Traced]:
    """An agent and a gateway process exporting their spans to an in-test OTLP receiver."""
    receiver = OtlpReceiver()
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": await receiver.start(), "OTEL_BSP_SCHEDULE_DELAY": "50"}
    try:
        async with process_stack(module_nats.url, minilm_root, scratch, env) as stack:
            yield Traced(stack, receiver)
    finally:
        await receiver.stop()


async def embed(traced: Traced, headers: dict[str, str]) -> httpx.Response:
    async with httpx.AsyncClient(base_url=traced.stack.url, timeout=60) as http:
        answer = await http.post(
            "/v1/embeddings",
            json={"input": "a traced sentence"},
            headers={"authorization": f"Bearer {traced.stack.key}", **headers},
        )
    assert answer.status_code == 200, answer.text
    return answer


def named(spans: list[Span], service: str, name: str) -> Span:
    found = [s for s in spans if s.service == service and s.name == name and s.trace_id == TRACE_ID]
    assert len(found) == 1, (service, name, [(s.service, s.name) for s in spans])
    return found[0]


@pytest.fixture(scope="module")
async def caller_traced(traced: Traced) -> tuple[httpx.Response, list[Span]]:
    """A request sent in the caller's trace, and every span of it once the worker's have come."""
    answer = await embed(traced, {"traceparent": TRACEPARENT, "tracestate": "vendor=1"})

    def complete(spans: list[Span]) -> bool:  # each process exports on its own schedule
        names = {s.name for s in spans if s.trace_id == TRACE_ID}
        return {"POST /v1/embeddings", "agent.invoke", "runtime"} <= names

    return answer, await traced.receiver.wait_until(complete)


async def test_the_response_names_the_callers_trace(caller_traced: tuple[httpx.Response, list[Span]]) -> None:
    answer, spans = caller_traced
    server = named(spans, "modelforge-gateway", "POST /v1/embeddings")
    assert answer.headers["x-trace-id"] == TRACE_ID
    assert answer.headers["traceresponse"] == f"00-{TRACE_ID}-{server.span_id}-01"


async def test_the_gateways_spans_hang_from_the_callers_span(
    caller_traced: tuple[httpx.Response, list[Span]],
) -> None:
    _, spans = caller_traced
    server = named(spans, "modelforge-gateway", "POST /v1/embeddings")
    assert server.parent_span_id == CALLER_SPAN
    for phase in ("authenticate", "admit", "place", "invoke"):
        assert named(spans, "modelforge-gateway", phase).parent_span_id == server.span_id, phase
    place = named(spans, "modelforge-gateway", "place")
    leases = [s for s in spans if s.trace_id == TRACE_ID and s.name == "lease"]  # one per append tried
    assert leases
    assert all(lease.parent_span_id == place.span_id for lease in leases)


async def test_the_agent_and_its_worker_continue_the_trace_from_the_gateways_invoke(
    caller_traced: tuple[httpx.Response, list[Span]],
) -> None:
    _, spans = caller_traced
    invoke = named(spans, "modelforge-gateway", "invoke")
    agent = named(spans, "modelforge-agent", "agent.invoke")
    worker = named(spans, "modelforge-worker", "worker.invoke")
    batch = named(spans, "modelforge-worker", "batch")
    runtime = named(spans, "modelforge-worker", "runtime")
    assert agent.parent_span_id == invoke.span_id
    assert worker.parent_span_id == agent.span_id
    assert batch.parent_span_id == worker.span_id
    assert runtime.parent_span_id == batch.span_id
    assert agent.attributes["modelforge.code"] == "OK"


async def test_no_span_carries_the_requests_text(caller_traced: tuple[httpx.Response, list[Span]]) -> None:
    _, spans = caller_traced
    assert all("traced sentence" not in str(s.attributes) for s in spans)


async def test_the_requests_events_record_its_trace_id(
    traced: Traced, caller_traced: tuple[httpx.Response, list[Span]]
) -> None:
    answer, _ = caller_traced
    request_id = answer.headers["x-request-id"]
    completed = (
        await events_until(
            traced.stack.connection,
            subjects.REQUESTS_STREAM,
            lambda e: isinstance(e, RequestCompleted) and e.request_id == request_id,
        )
    )[-1]
    assert isinstance(completed, RequestCompleted)
    assert completed.trace_id == TRACE_ID


@pytest.mark.parametrize(
    "malformed",
    [
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # an all-zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # an all-zero parent id
        "not a traceparent",
        f"ff-{TRACE_ID}-{CALLER_SPAN}-01",  # version ff is forbidden
    ],
)
async def test_a_malformed_traceparent_starts_a_new_trace(traced: Traced, malformed: str) -> None:
    answer = await embed(traced, {"traceparent": malformed})
    trace_id = answer.headers["x-trace-id"]
    assert re.fullmatch("[0-9a-f]{32}", trace_id)
    assert trace_id not in (TRACE_ID, "0" * 32)
    assert answer.headers["traceresponse"].startswith(f"00-{trace_id}-")
