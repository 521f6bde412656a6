"""What the agent and a worker say over their socket: length-prefixed msgpack frames, each a call
(agent → worker) or an answer (worker → agent) carrying the call's number, so that many invokes can
be in flight at once and be answered in any order.

A frame is a 4-byte big-endian length, then that many bytes of msgpack. Payloads and results travel
as msgpack binary: the agent never re-encodes them.
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any

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


class Invoke(msgspec.Struct, frozen=True, tag="invoke"):
    payload: bytes  # the contract's input, JSON
    timeout_s: float  # what is left of the request's deadline
    traceparent: str = ""  # the agent's invoke span (W3C), parent of the worker's spans


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


class FrameWriter:
    """Encodes messages into length-prefixed frames on one stream, each in a single write."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self._encoder = msgspec.msgpack.Encoder()

    def send(self, message: Call | Answer) -> None:
        buffer = bytearray(_HEADER.size)
        self._encoder.encode_into(message, buffer, _HEADER.size)
        _HEADER.pack_into(buffer, 0, len(buffer) - _HEADER.size)
        self.writer.write(buffer)


async def read_frame(reader: asyncio.StreamReader) -> bytes | None:
    """The next frame's body, or None at a clean end of the stream (or one cut mid-frame)."""
    try:
        (length,) = _HEADER.unpack(await reader.readexactly(_HEADER.size))
        return await reader.readexactly(length)
    except (asyncio.IncompleteReadError, ConnectionError):
        return None


call_decoder = msgspec.msgpack.Decoder(Call)
answer_decoder = msgspec.msgpack.Decoder(Answer)
