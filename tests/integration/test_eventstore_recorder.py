"""Per-request records written by `RequestRecorder`: held with the connection's other records, each
acknowledged where its acknowledgement is read, and every one that is not stored (refused, taken
by no stream, unanswered, refused by the connection) handed to its `failed` callback once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from nats.aio.msg import Msg
from nats.errors import ConnectionClosedError, NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

from eventstore.connection import Connection, connect, write_held
from eventstore.errors import PublishFailed
from eventstore.recorder import RequestRecorder
from eventstore.store import EventStore, Outgoing, prepare_request
from streams import subjects
from streams.envelope import H_MSG_ID, new_id
from streams.events.requests import RequestRejected


class Failures:
    """What a recorder handed on, and an event set by each."""

    def __init__(self) -> None:
        self.seen: list[tuple[Outgoing, Exception]] = []
        self.arrived = asyncio.Event()

    def __call__(self, outgoing: Outgoing, error: Exception) -> None:
        self.seen.append((outgoing, error))
        self.arrived.set()


@pytest.fixture
async def recording(
    nats_url: str, connection: Connection
) -> AsyncIterator[tuple[EventStore, RequestRecorder]]:
    """A connection of the test's own (its holding changed at will), once the streams are there."""
    conn = await connect(nats_url, "recorder-test")
    store = EventStore(conn)
    recorder = RequestRecorder(store)
    await recorder.open()
    yield store, recorder
    await recorder.written(5)
    await conn.close()


async def ignore(message: Msg) -> None:
    pass


def rejected() -> Outgoing:
    request_id = new_id()
    event = RequestRejected(
        request_id=request_id,
        client_id="c",
        capability="rag.embedding@1",
        code="RATE_LIMITED",
        http_status=429,
    )
    return prepare_request("rag.embedding@1", request_id, event)


def elsewhere(outgoing: Outgoing, subject: str, **headers: str) -> Outgoing:
    return Outgoing(subject, outgoing.data, {**outgoing.headers, **headers}, outgoing.envelope)


async def test_a_record_is_in_the_stream_once_written(
    recording: tuple[EventStore, RequestRecorder],
) -> None:
    store, recorder = recording
    failures, outgoing = Failures(), rejected()
    recorder.record(outgoing, failures)
    write_held(store.client)
    await recorder.written(5)
    assert recorder.unanswered == 0
    assert not failures.seen
    # its acknowledgement's sequence is what the store says it has seen written
    stored = await store.client.jetstream().get_msg(subjects.REQUESTS_STREAM, store.last_request_sequence)
    assert stored.headers is not None
    assert stored.headers[H_MSG_ID] == outgoing.envelope.event_id


async def test_written_waits_for_every_record_held_before_it(
    recording: tuple[EventStore, RequestRecorder],
) -> None:
    store, recorder = recording
    store.client.held_for_s = 3600.0  # type: ignore[attr-defined]
    failures = Failures()
    for _ in range(3):
        recorder.record(rejected(), failures)
    assert recorder.unanswered == 3
    write_held(store.client)
    await recorder.written(5)
    assert recorder.unanswered == 0
    assert not failures.seen


async def test_a_record_no_stream_takes_is_handed_on_as_no_responders(
    recording: tuple[EventStore, RequestRecorder],
) -> None:
    store, recorder = recording
    failures, outgoing = Failures(), elsewhere(rejected(), f"test.recorder.nostream.{new_id()}")
    recorder.record(outgoing, failures)
    write_held(store.client)
    await asyncio.wait_for(failures.arrived.wait(), 5)
    ((handed, error),) = failures.seen
    assert handed is outgoing
    assert isinstance(error, NoRespondersError)


async def test_a_record_the_stream_refuses_is_handed_on_with_the_refusal(
    recording: tuple[EventStore, RequestRecorder],
) -> None:
    store, recorder = recording
    refused = elsewhere(rejected(), rejected().subject, **{"Nats-Expected-Last-Subject-Sequence": str(2**62)})
    failures = Failures()
    recorder.record(refused, failures)
    write_held(store.client)
    await asyncio.wait_for(failures.arrived.wait(), 5)
    ((_, error),) = failures.seen
    assert isinstance(error, PublishFailed)


async def test_a_record_left_unanswered_is_handed_on_after_the_publish_timeout(
    recording: tuple[EventStore, RequestRecorder], nats_url: str
) -> None:
    store, recorder = recording
    store.publish_timeout = 0.2
    silent = await connect(nats_url, "recorder-test-silent")  # takes the record, answers nothing
    try:
        subject = f"test.recorder.silent.{new_id()}"
        await silent.client.subscribe(subject, cb=ignore)  # a queue read by nobody holds drain 30 s
        await silent.client.flush()
        failures = Failures()
        recorder.record(elsewhere(rejected(), subject), failures)
        write_held(store.client)
        await asyncio.wait_for(failures.arrived.wait(), 5)
        ((_, error),) = failures.seen
        assert isinstance(error, NatsTimeoutError)
        assert recorder.unanswered == 0
    finally:
        await silent.close()


async def test_a_closed_connection_hands_a_record_on_at_once(nats_url: str) -> None:
    conn = await connect(nats_url, "recorder-test-closed")
    recorder = RequestRecorder(EventStore(conn))
    await recorder.open()
    await conn.close()
    failures = Failures()
    recorder.record(rejected(), failures)
    ((_, error),) = failures.seen
    assert isinstance(error, ConnectionClosedError)
    assert recorder.unanswered == 0
