"""Calls and answers between the agent and a worker travel as length-prefixed msgpack frames; a
stream that ends, even mid-frame, is the end of the worker."""

from __future__ import annotations

import asyncio

from nodeagent.worker.protocol import (
    Answer,
    Call,
    Failed,
    FrameWriter,
    Invoke,
    answer_decoder,
    call_decoder,
    read_frame,
)


class _Into:
    """A stream writer that writes into a reader."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self.reader = reader

    def write(self, data: bytes | bytearray) -> None:
        self.reader.feed_data(bytes(data))


async def test_calls_and_answers_arrive_whole_and_in_order() -> None:
    reader = asyncio.StreamReader()
    out = FrameWriter(_Into(reader))  # type: ignore[arg-type]
    call = Call(1, Invoke(b'{"texts": ["a"]}', 2.5))
    answer = Answer(1, Failed("INVALID_INPUT", "between 1 and 2048 items are allowed"))
    out.send(call)
    out.send(answer)
    reader.feed_eof()

    assert call_decoder.decode(await read_frame(reader) or b"") == call
    assert answer_decoder.decode(await read_frame(reader) or b"") == answer
    assert await read_frame(reader) is None


async def test_a_frame_cut_short_is_the_end_of_the_stream() -> None:
    reader = asyncio.StreamReader()
    reader.feed_data((100).to_bytes(4, "big") + b"only ten b")
    reader.feed_eof()
    assert await read_frame(reader) is None
