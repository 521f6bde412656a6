"""What tracing costs one served request: the spans and context hand-offs a request makes through
the gateway, the agent and the worker, run alone, with tracing off (no OTLP endpoint: the API's
no-op tracer) and on (the SDK batching to a real OTLP/HTTP receiver in another process).

Each mode runs in a fresh interpreter (a process installs its tracer provider once). Per request
it drives the gateway's real edge (`ResponseStamps`, which starts the request's span and stamps
`traceresponse`) around the gateway's phase spans and NATS header injection, then the agent's
extraction and span, the worker's, and the batcher's spans, all in one process: the sum of what
the three processes spend. Reports µs of wall and of CPU (every thread: the exporter's included)
per request, and their ratio to one NATS request–reply round trip (the raw limit the gateway's
overhead is measured in; `bench/rawlimits.py`), measured in the same run.

    .venv/bin/python -m bench.tracing [--requests 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import rawlimits
from modelforge.devstack.nats_server import start_nats
from modelforge.devstack.processes import stop_pid

# request, authenticate, admit, place, lease, invoke, agent.invoke, worker.invoke, batch, runtime
SPANS_PER_REQUEST = 10
RECEIVER = """
import asyncio, sys
from tests.support.otlp import OtlpReceiver
async def main():
    receiver = OtlpReceiver()
    print(await receiver.start(), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await receiver.stop()
    print(len(receiver.spans), flush=True)
asyncio.run(main())
"""


def _one_mode(requests: int, bare: bool) -> dict[str, float]:
    """Runs in the child: `requests` requests' tracing work; wall and CPU µs per request. `bare`:
    the same requests with no span started and no context handed on (the edge stamps one fixed
    trace): the baseline the other modes are measured from."""
    from opentelemetry.trace import INVALID_SPAN, SpanKind

    from gateway.http import stamps
    from gateway.http.stamps import ResponseStamps
    from nodeagent.worker import batch_spans
    from streams import tracing

    tracing.install("bench-tracing")
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

    async def untraced(scope: object, receive: object, send: object) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})  # type: ignore[operator]
        await send({"type": "http.response.body", "body": b"{}"})  # type: ignore[operator]

    async def gateway_phases(scope: object, receive: object, send: object) -> None:
        with tracing.span("authenticate"):
            pass
        with tracing.span("admit"):
            pass
        with tracing.span("place", attributes={"modelforge.deployment_id": "d"}), tracing.span("lease"):
            pass
        with tracing.span("invoke", kind=SpanKind.CLIENT):
            headers = tracing.inject({})
        agent_side(headers)
        await send({"type": "http.response.start", "status": 200, "headers": []})  # type: ignore[operator]
        await send({"type": "http.response.body", "body": b"{}"})  # type: ignore[operator]

    def agent_side(headers: dict[str, str]) -> None:
        with tracing.continued("agent.invoke", headers, SpanKind.SERVER):
            worker_call = tracing.traceparent()
        with tracing.continued("worker.invoke", {"traceparent": worker_call}, SpanKind.SERVER):
            submitted = batch_spans.submitted()
        if submitted[0] is not None:
            now = time.time_ns()
            batch_spans.record([(submitted[0], submitted[1])], 1, now, now, ok=True)

    if bare:
        stamps._request_span = lambda scope, request_id: INVALID_SPAN  # type: ignore[assignment]
    edge = ResponseStamps(untraced if bare else gateway_phases)  # type: ignore[arg-type]
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/embeddings",
        "headers": [(b"traceparent", traceparent.encode())],
    }

    async def receive() -> dict[str, object]:
        return {"type": "http.request", "body": b""}

    async def send(message: object) -> None:
        pass

    async def run(n: int) -> None:
        for _ in range(n):
            await edge(dict(scope), receive, send)  # type: ignore[arg-type]

    asyncio.run(run(min(2000, requests)))  # warm-up
    wall, cpu = time.perf_counter(), time.process_time()
    asyncio.run(run(requests))
    if tracing.exporting():  # the exporter's serialising and sending is part of the cost
        from opentelemetry import trace

        trace.get_tracer_provider().force_flush()  # type: ignore[attr-defined]
    return {
        "wall_us": (time.perf_counter() - wall) / requests * 1e6,
        "cpu_us": (time.process_time() - cpu) / requests * 1e6,
    }


def _run_mode(requests: int, endpoint: str | None, bare: bool = False) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    if endpoint:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
    out = subprocess.run(
        [sys.executable, "-m", "bench.tracing", "--child", "--requests", str(requests), *(["--bare"] if bare else [])],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--bare", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_one_mode(args.requests, args.bare)))
        return
    receiver = subprocess.Popen(
        [sys.executable, "-c", RECEIVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert receiver.stdin is not None
    assert receiver.stdout is not None
    with tempfile.TemporaryDirectory() as scratch:
        nats = start_nats(Path(scratch) / "nats")
        try:
            round_trip_us = rawlimits.p50(asyncio.run(rawlimits.nats_round_trips(nats.url, 3))) * 1000
        finally:
            stop_pid(nats.pid)
    try:
        bare = _run_mode(args.requests, None, bare=True)
        off = _run_mode(args.requests, None)
        on = _run_mode(args.requests, receiver.stdout.readline().strip())
    finally:
        receiver.stdin.close()
        spans = receiver.stdout.read().strip()
        receiver.wait()
    print(f"NATS request-reply p50 (raw limit): {round_trip_us:.0f} µs")
    made = (args.requests + min(2000, args.requests)) * SPANS_PER_REQUEST
    print(f"spans the receiver got: {spans} of {made} (the SDK drops what overflows its queue)")
    print(
        f"no tracing at all (baseline): {bare['wall_us']:6.1f} µs wall, {bare['cpu_us']:6.1f} µs CPU per request"
    )
    for name, mode in (("off (no endpoint)", off), ("on (OTLP/HTTP)", on)):
        extra = mode["cpu_us"] - bare["cpu_us"]
        print(
            f"tracing {name:18}: {mode['wall_us']:6.1f} µs wall, {mode['cpu_us']:6.1f} µs CPU per request;"
            f" +{extra:.1f} µs CPU = {extra / round_trip_us:.3f} NATS round trips"
        )


if __name__ == "__main__":
    main()
