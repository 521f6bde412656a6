"""What reaches the gateway below JSON, over a raw socket: bodies larger than the limit (declared or
chunked), a `content-length` that lies either way, bytes that are not HTTP, a client that hangs up
mid-body. Every answer is in the one error shape with its request id and server time; the size
limit holds before the body is read; nothing is recorded but the request's own refusal."""

from __future__ import annotations

import asyncio
import logging

import msgspec
import pytest

from streams import subjects
from streams.contracts import EMBEDDING
from streams.events.requests import RequestRejected
from tests.integration.gateway.conftest import SHARES_THE_STACK, Stack, first_event

pytestmark = SHARES_THE_STACK

LIMIT = EMBEDDING.limits.max_request_bytes


class Answer(msgspec.Struct):
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def error(self) -> dict[str, object]:
        error: dict[str, object] = msgspec.json.decode(self.body)["error"]
        return error


def answers_in(data: bytes) -> list[Answer]:
    """The whole HTTP/1.1 responses in what the server sent (each with a content-length, as ours
    have)."""
    answers = []
    while b"\r\n\r\n" in data:
        head, _, rest = data.partition(b"\r\n\r\n")
        status_line, *lines = head.decode().split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines)}
        size = int(headers["content-length"])
        if len(rest) < size:
            break
        answers.append(Answer(int(status_line.split()[1]), headers, rest[:size]))
        data = rest[size:]
    return answers


async def exchange(stack: Stack, request: bytes, *, then_close: bool = False) -> tuple[bytes, bool]:
    """Send `request` on a new connection and read until the server closes it, or has answered and
    keeps the connection open: what it sent, and whether it closed the connection. With
    `then_close`, hang up after sending."""
    host, port = stack.gateway.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(request)
    await writer.drain()
    if then_close:
        writer.close()
        await writer.wait_closed()
        return b"", True
    received, closed = b"", False
    try:
        async with asyncio.timeout(20):
            while chunk := await reader.read(65536):
                received += chunk
                if answers_in(received) and b"connection: close" not in received:
                    break  # answered, and the connection stays open for the next request
            else:
                closed = True
    finally:
        writer.close()
    return received, closed


def post(stack: Stack, headers: bytes, body: bytes = b"", path: bytes = b"/v1/embeddings") -> bytes:
    return (
        b"POST " + path + b" HTTP/1.1\r\nhost: gateway\r\n"
        b"authorization: Bearer " + stack.key.key.encode() + b"\r\n" + headers + b"\r\n" + body
    )


def chunked(size: int, piece: int = 1 << 16) -> bytes:
    return b"".join(b"%x\r\n" % piece + b"a" * piece + b"\r\n" for _ in range(size // piece))


def assert_stamped_error(answer: Answer, status: int, code: str) -> None:
    assert answer.status == status, answer
    assert answer.headers["content-type"] == "application/json"
    assert answer.error["code"] == code
    assert answer.error["request_id"] == answer.headers["x-request-id"]
    assert float(answer.headers["x-mf-latency-ms"]) >= 0
    assert "total;dur=" in answer.headers["server-timing"]


async def rejection(stack: Stack, request_id: str) -> RequestRejected:
    rejected = await first_event(
        stack,
        subjects.REQUESTS_STREAM,
        lambda e: isinstance(e, RequestRejected) and e.request_id == request_id,
    )
    assert isinstance(rejected, RequestRejected)
    return rejected


async def test_a_declared_length_over_the_limit_is_refused_before_any_body_is_sent(stack: Stack) -> None:
    received, _ = await exchange(stack, post(stack, b"content-length: %d\r\n" % (LIMIT + 1)))
    [answer] = answers_in(received)
    assert_stamped_error(answer, 413, "PAYLOAD_TOO_LARGE")
    assert (await rejection(stack, answer.headers["x-request-id"])).code == "PAYLOAD_TOO_LARGE"


async def test_a_chunked_body_is_refused_once_it_passes_the_limit_without_being_read_to_its_end(
    stack: Stack,
) -> None:
    # Past the limit, and never finished (no last chunk): the answer cannot wait for the end.
    request = post(stack, b"transfer-encoding: chunked\r\n", chunked(LIMIT + (1 << 17)))
    received, _ = await exchange(stack, request)
    [answer] = answers_in(received)
    assert_stamped_error(answer, 413, "PAYLOAD_TOO_LARGE")


async def test_a_body_shorter_than_declared_is_408_once_the_request_deadline_passes(stack: Stack) -> None:
    request = post(stack, b"content-length: 100\r\nx-request-timeout-ms: 300\r\n", b'{"input": "hel')
    received, closed = await exchange(stack, request)
    [answer] = answers_in(received)
    assert_stamped_error(answer, 408, "REQUEST_TIMEOUT")
    assert answer.error["type"] == "timeout_error"
    assert closed  # the rest of that body would be read as the next request: the connection ends
    assert (await rejection(stack, answer.headers["x-request-id"])).http_status == 408


async def test_a_body_longer_than_declared_is_refused_as_not_http(stack: Stack) -> None:
    # What follows the declared 12 bytes (`ello"}`) would be the next request: it is not one. (The
    # declared part, `{"input": "h`, is no JSON either; its answer, if it gets one before the
    # connection ends, is the same refusal.)
    request = post(stack, b"content-length: 12\r\n", b'{"input": "hello"}')
    received, closed = await exchange(stack, request)
    answers = answers_in(received)
    assert answers
    for answer in answers:
        assert_stamped_error(answer, 400, "INVALID_INPUT")
    assert closed


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"HELLO WORLD\r\n\r\n",
        b"POST /v1/embeddings HTTP/1.1\r\nhost: gateway\r\ncontent-length: ten\r\n\r\n",
        b"POST /v1/embeddings HTTP/1.1\r\nhost: gateway\r\ncontent-length: 2\r\n"
        b"transfer-encoding: chunked\r\n\r\n0\r\n\r\n",
        b"POST /v1/embeddings HTTP/1.1\r\nbad header: x\r\n\r\n",
    ],
    ids=["not http", "content-length not a number", "content-length and chunked", "space in a header name"],
)
async def test_bytes_that_are_not_http_get_the_one_error_shape(stack: Stack, request_bytes: bytes) -> None:
    received, closed = await exchange(stack, request_bytes)
    [answer] = answers_in(received)
    assert_stamped_error(answer, 400, "INVALID_INPUT")
    assert closed


async def test_a_client_that_hangs_up_mid_body_is_recorded_cancelled_and_logged_as_no_error(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    await exchange(stack, post(stack, b"content-length: 1000\r\n", b'{"input": "hel'), then_close=True)
    cancelled = await first_event(
        stack,
        subjects.REQUESTS_STREAM,
        lambda e: isinstance(e, RequestRejected) and e.code == "REQUEST_CANCELLED",
    )
    assert isinstance(cancelled, RequestRejected)
    assert cancelled.client_id == stack.key.client_id
    await stack.gateway.settled()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
