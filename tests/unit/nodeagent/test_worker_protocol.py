"""Calls and answers between the agent and a worker travel as length-prefixed msgpack frames, whole
however the stream cuts them; a stream that ends, even mid-frame, is the end of the worker."""

from __future__ import annotations

from nodeagent.worker.protocol import (
    Answer,
    Call,
    Failed,
    FrameReader,
    FrameWriter,
    Invoke,
    answer_decoder,
    call_decoder,
)


class _Collected:
    """A stream's bytes as the frame writer writes them, and what a frame reader makes of them."""

    def __init__(self) -> None:
        self.written = bytearray()
        self.frames: list[bytes] = []
        self.ended = False
        self.reader = FrameReader(
            lambda frame: self.frames.append(bytes(frame)), self._end, FrameWriter(self)
        )

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += data

    def _end(self) -> None:
        self.ended = True


CALL = Call(1, Invoke(b'{"texts": ["a"]}', 2.5))
ANSWER = Answer(1, Failed("INVALID_INPUT", "between 1 and 2048 items are allowed"))


def test_calls_and_answers_arrive_whole_and_in_order() -> None:
    stream = _Collected()
    FrameWriter(stream).send(CALL)
    FrameWriter(stream).send(ANSWER)
    stream.reader.data_received(bytes(stream.written))

    assert call_decoder.decode(stream.frames[0]) == CALL
    assert answer_decoder.decode(stream.frames[1]) == ANSWER


def test_frames_cut_anywhere_by_the_stream_arrive_whole() -> None:
    stream = _Collected()
    for _ in range(3):
        FrameWriter(stream).send(CALL)
    written = bytes(stream.written)
    for start in range(0, len(written), 5):  # pieces that split headers and bodies alike
        stream.reader.data_received(written[start : start + 5])

    assert [call_decoder.decode(frame) for frame in stream.frames] == [CALL] * 3


def test_a_frame_cut_short_is_dropped_at_the_end_of_the_stream() -> None:
    stream = _Collected()
    stream.reader.data_received((100).to_bytes(4, "big") + b"only ten b")
    stream.reader.connection_lost(None)

    assert (stream.frames, stream.ended) == ([], True)
