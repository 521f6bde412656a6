"""The worker's loop: answer the agent's calls on one socket until it closes.

The first call loads the deployment; after it, invokes, health checks and probes' test inferences
run concurrently as tasks, so that concurrent invokes meet in the dynamic batcher. Content is never
logged: an engine fault is reported by its type.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
import time
from pathlib import Path

import setproctitle
from opentelemetry.trace import SpanKind

from artifacts import ArtifactManifest, VerifiedArtifactSet
from nodeagent.worker.capabilities import CapabilityServer
from nodeagent.worker.loading import Warm, load_blocking
from nodeagent.worker.protocol import (
    Answer,
    Call,
    Check,
    Checked,
    Failed,
    FrameReader,
    FrameWriter,
    Invoke,
    Load,
    Loaded,
    Reply,
    Request,
    Served,
    Tested,
    TestInference,
    call_decoder,
)
from streams import codes
from streams.codes import ServingError
from streams.redaction import fault_summary
from streams.tracing import continued

log = logging.getLogger("modelforge.worker")

# What an unforeseen fault in each kind of call is reported as.
_FAULTS: dict[type[Request], tuple[str, str]] = {
    Load: (codes.RESIDENCY_LOAD_FAILED.code, "runtime load failed"),
    Invoke: (codes.INFERENCE_FAILED.code, "inference failed"),
    Check: (codes.INFERENCE_FAILED.code, "the test inference failed"),
    TestInference: (codes.INFERENCE_FAILED.code, "the test inference failed"),
}


class Session:
    """One worker's state: its loaded servable (none until the load call), and where answers go."""

    def __init__(self, out: FrameWriter) -> None:
        self.out = out
        self.warm: Warm | None = None

    async def answer(self, call: Call) -> None:
        try:
            reply = await self.reply(call.request)
        except ServingError as error:
            reply = Failed(error.code, error.message)
        except Exception as error:
            log.error("%s failed: %s", type(call.request).__name__, fault_summary(error))
            code, what = _FAULTS[type(call.request)]
            reply = Failed(code, f"{what}: {type(error).__name__}")
        self.out.send(Answer(call.number, reply))

    async def reply(self, request: Request) -> Reply:
        match request:
            case Load():
                return await self._load(request)
            case Invoke():
                carrier = {"traceparent": request.traceparent}
                attributes = {"modelforge.payload_bytes": len(request.payload)}
                with continued("worker.invoke", carrier, SpanKind.SERVER, attributes):
                    try:
                        async with asyncio.timeout(request.timeout_s):
                            body, timings = await self._server().serve(request.payload, request.input_type)
                    except TimeoutError:
                        return Failed(
                            codes.REQUEST_TIMEOUT.code, "the worker did not finish before the deadline"
                        )
                    return Served(body, timings)
            case Check():
                await self._server().check()
                return Checked()
            case TestInference():
                server = self._server()
                started = time.perf_counter()
                output = await asyncio.to_thread(server.test_inference)
                elapsed = (time.perf_counter() - started) * 1000
                return Tested(elapsed, output.dimension, output.normalized)

    async def _load(self, request: Load) -> Loaded:
        if self.warm is not None:
            raise ServingError(codes.RESIDENCY_CONFLICT.code, "this worker has already loaded its model")
        named(request.serves)
        manifest = ArtifactManifest.from_dict(request.manifest)
        verified = VerifiedArtifactSet(Path(request.folder), manifest, request.bytes_verified)
        # This process serves only this model: its batches run on the loop's own thread.
        self.warm = await asyncio.to_thread(
            functools.partial(load_blocking, inline_batches=True),
            verified,
            request.capability,
            request.gpu_index,
            request.max_batch,
            request.cpu_threads,
        )
        memory = self.warm.memory
        return Loaded(
            runtime=self.warm.runtime.kind,
            warmup_ms=self.warm.warmup_ms,
            weights_bytes=self.warm.weights_bytes,
            baseline_bytes=memory.baseline_bytes,
            current_bytes=memory.current_bytes,
            peak_bytes=memory.peak_bytes,
        )

    def _server(self) -> CapabilityServer:
        if self.warm is None:
            raise ServingError(codes.INFERENCE_FAILED.code, "no model is loaded in this worker")
        return self.warm.server


def named(serves: str) -> None:
    """`ps` (and /proc/PID/cmdline) says what this worker serves, from its load on."""
    if serves:
        setproctitle.setproctitle(f"{setproctitle.getproctitle()} --serves {serves}")


async def serve(sock: socket.socket) -> None:
    """Answer calls until the agent closes the socket (or dies). Calls are read in the event loop's
    read callback (FrameReader) and each starts its task there: one loop hop fewer than a reader task."""
    loop = asyncio.get_running_loop()
    closed = loop.create_future()
    tasks: set[asyncio.Task[None]] = set()
    session = Session(FrameWriter())

    def called(frame: memoryview) -> None:
        task = loop.create_task(session.answer(call_decoder.decode(frame)))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    def ended() -> None:
        if not closed.done():
            closed.set_result(None)

    transport, _ = await loop.create_unix_connection(
        lambda: FrameReader(called, ended, session.out), sock=sock
    )
    try:
        await closed
    finally:
        transport.close()
        if session.warm is not None:
            await session.warm.server.close()
