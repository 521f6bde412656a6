"""What the agent and a worker say over their socket: length-prefixed msgpack frames, each a call
(agent → worker) or an answer (worker → agent) carrying the call's number, so that many invokes can
be in flight at once and be answered in any order.

A frame is a 4-byte big-endian length, then that many bytes of msgpack. Payloads and results travel
as msgpack binary: the agent never re-encodes them.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable
from typing import Any, Protocol

import msgspec

from streams.messages import WorkerTimings

_HEADER = struct.Struct(">I")


# ---- calls ---------------------------------------------------------------------------------------


class Load(msgspec.Struct, frozen=True, tag="load"):
    """Load the verified set at `folder` (its manifest as `ArtifactManifest.to_dict` gives it)."""

    folder: str
    manifest: dict[str, Any]
    bytes_verified: int
    capability: str
    gpu_index: int | None  # None: the CPU runtime
    max_batch: int
    cpu_threads: int
    serves: str = ""  # the deployment or candidate, for the worker's process title


class Invoke(msgspec.Struct, frozen=True, tag="invoke"):
    payload: bytes  # the contract's input, JSON
    timeout_s: float  # what is left of the request's deadline
    traceparent: str = ""  # the agent's invoke span (W3C), parent of the worker's spans
    input_type: str = ""  # an embedding request's "query" | "document" ("": not given)


class Check(msgspec.Struct, frozen=True, tag="check"):
    """The fixed test inference through the batcher (a health check)."""


class TestInference(msgspec.Struct, frozen=True, tag="test"):
    """The fixed test inference, timed and measured (a probe)."""


Request = Load | Invoke | Check | TestInference


class Call(msgspec.Struct, frozen=True, array_like=True):
    number: int
    request: Request


# ---- answers -------------------------------------------------------------------------------------


class Loaded(msgspec.Struct, frozen=True, tag="loaded"):
    runtime: str
    warmup_ms: float
    weights_bytes: int
    # The runtime's own view of its memory domain (this process's RSS, or its device memory).
    baseline_bytes: int
    current_bytes: int
    peak_bytes: int


class Served(msgspec.Struct, frozen=True, tag="served"):
    body: bytes  # the contract's output, JSON
    timings: WorkerTimings


class Tested(msgspec.Struct, frozen=True, tag="tested"):
    inference_ms: float
    dimension: int
    normalized: bool


class Checked(msgspec.Struct, frozen=True, tag="checked"):
    pass


class Failed(msgspec.Struct, frozen=True, tag="failed"):
    code: str
    message: str


Reply = Loaded | Served | Tested | Checked | Failed


class Answer(msgspec.Struct, frozen=True, array_like=True):
    number: int
    reply: Reply


# ---- framing -------------------------------------------------------------------------------------


class Transport(Protocol):
    def write(self, data: bytes | bytearray | memoryview, /) -> None: ...


class FrameWriter:
    """Encodes messages into length-prefixed frames on one stream, each in a single write."""

    def __init__(self, transport: Transport | None = None) -> None:
        self.transport = transport  # None until its FrameReader's connection is made
        self._encoder = msgspec.msgpack.Encoder()

    def send(self, message: Call | Answer) -> None:
        buffer = bytearray(_HEADER.size)
        self._encoder.encode_into(message, buffer, _HEADER.size)
        _HEADER.pack_into(buffer, 0, len(buffer) - _HEADER.size)
        assert self.transport is not None
        self.transport.write(buffer)


class FrameReader(asyncio.Protocol):
    """Splits a stream into frames as its bytes arrive and hands each to `on_frame` (a view, valid
    only during the call) from the event loop's own read callback; `on_end` once the stream ends;
    `replies` writes on the same stream from the moment it connects (before its first frame).
    With no reader task to wake between the bytes and whoever waits for them, each message costs
    one event-loop hop fewer than through an `asyncio.StreamReader` (bench/agent.py's worker hop)."""

    def __init__(
        self, on_frame: Callable[[memoryview], None], on_end: Callable[[], None], replies: FrameWriter
    ) -> None:
        self.on_frame, self.on_end, self.replies = on_frame, on_end, replies
        self._pending = bytearray()  # the start of a frame not yet whole
        self._wanted = 0  # how long _pending must grow before a frame in it is whole

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.replies.transport = transport  # type: ignore[assignment]  # a stream transport writes

    def data_received(self, data: bytes) -> None:
        if self._pending:  # a frame arriving in pieces: keep them until it is whole
            self._pending += data
            if len(self._pending) < self._wanted:
                return
            data, self._pending = bytes(self._pending), bytearray()
        view, offset, size = memoryview(data), 0, len(data)
        while True:
            if size - offset < _HEADER.size:
                self._wanted = _HEADER.size
                break
            (length,) = _HEADER.unpack_from(view, offset)
            end = offset + _HEADER.size + length
            if end > size:
                self._wanted = end - offset
                break
            self.on_frame(view[offset + _HEADER.size : end])
            offset = end
        if offset < size:
            self._pending = bytearray(view[offset:])

    def connection_lost(self, exc: Exception | None) -> None:
        self.on_end()  # a frame cut short is dropped: its sender is gone


call_decoder = msgspec.msgpack.Decoder(Call)
answer_decoder = msgspec.msgpack.Decoder(Answer)
