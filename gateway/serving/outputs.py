"""Reading an agent's `InvokeReply`: its outcome, the worker's timings and the contract output.

A dialect that names its output's type (`StructOutput`) has the reply and the output read in one
pass over the JSON, and the request's usage taken from that same reading: an embedding reply of
32 vectors is some 150 KB (float32 text), and each pass over it costs about as much as the rest of
the request's own work. Any other reads the output as JSON bytes (`JSON_OUTPUT`), for its render to decode.

A reply that is not an `InvokeReply`, or whose output is not what its reader takes, is the
worker's INVALID_OUTPUT; a failure reply is its own code.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Generic, TypeVar

import msgspec

from streams import codes
from streams.codes import ServingError
from streams.messages import InvokeReply, WorkerTimings

Output = TypeVar("Output")


class Counted(msgspec.Struct):
    """What a request's usage takes of any output: the tokens the model counted (embedding and
    reranking outputs carry it; others count none)."""

    input_tokens: int = 0


CountedOutput = TypeVar("CountedOutput", bound=Counted)


class Reply(msgspec.Struct, Generic[Output], frozen=True, kw_only=True):
    """`InvokeReply` with its result read as `Output` in the same pass (a success's: never null)."""

    ok: bool
    result: Output
    timings: WorkerTimings = WorkerTimings()


_invoke_reply = msgspec.json.Decoder(InvokeReply)
_counted = msgspec.json.Decoder(Counted)


class OutputReader(ABC, Generic[Output]):
    """A worker's reply → its output and timings (ServingError for a failure or a broken reply);
    and the tokens an output counted, for the request's usage."""

    @abstractmethod
    def read(self, data: bytes) -> tuple[Output, WorkerTimings]: ...

    @abstractmethod
    def tokens(self, output: Output) -> int: ...


class JsonOutput(OutputReader[bytes]):
    """The output as its JSON, for the render to decode."""

    def read(self, data: bytes) -> tuple[bytes, WorkerTimings]:
        reply = _failed_unless_ok(data)
        return bytes(reply.result), reply.timings

    def tokens(self, output: bytes) -> int:
        return _counted.decode(output).input_tokens


class StructOutput(OutputReader[CountedOutput]):
    """The output decoded along with the reply, by a decoder of `Reply[TheOutput]`."""

    def __init__(self, decoder: msgspec.json.Decoder[Reply[CountedOutput]]) -> None:
        self._decoder = decoder

    def read(self, data: bytes) -> tuple[CountedOutput, WorkerTimings]:
        try:
            reply = self._decoder.decode(data)
        except (msgspec.ValidationError, msgspec.DecodeError) as error:
            _failed_unless_ok(data)  # (a failure's result is null: it is read as a failure)
            raise ServingError(
                "INVALID_OUTPUT", f"the worker's output could not be read ({type(error).__name__})"
            ) from None
        if not reply.ok:
            _failed_unless_ok(data)
        return reply.result, reply.timings

    def tokens(self, output: CountedOutput) -> int:
        return output.input_tokens


JSON_OUTPUT = JsonOutput()


def _failed_unless_ok(data: bytes) -> InvokeReply:
    """The reply, if it is a success; else the failure it reports, or INVALID_OUTPUT."""
    try:
        reply = _invoke_reply.decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError):
        raise ServingError("INVALID_OUTPUT", "the worker's reply is not an InvokeReply") from None
    if not reply.ok:
        code = reply.code if reply.code in codes.ERROR_CODES else "INFERENCE_FAILED"
        raise ServingError(code, reply.message or "the worker failed to run the request")
    return reply
