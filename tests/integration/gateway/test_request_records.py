"""A request's events go out with no task where the connection takes them at once, and one whose
first attempt is not acknowledged is made again, in a task, until MF_REQUESTS takes it."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from nats.errors import NoRespondersError

from eventstore.connection import Connection, connect
from eventstore.provision import provision
from eventstore.replies import inbox_of
from eventstore.store import EventStore, prepare_request
from gateway.serving.background import record_request
from gateway.serving.context import ServingContext
from gateway.state.live import LiveState
from modelforge.devstack.nats_server import start_nats
from modelforge.devstack.processes import stop_pid
from streams import subjects
from streams.envelope import new_id
from streams.events.requests import RequestAccepted

CAPABILITY = "rag.embedding@1"


def accepted(request_id: str) -> RequestAccepted:
    return RequestAccepted(
        request_id=request_id,
        client_id="client-a",
        capability=CAPABILITY,
        input_sha256="0" * 64,
        shape_bucket="items:1-4/chars:0-512",
        items=1,
    )


async def _subscribed(connection: Connection) -> None:
    """The connection's reply inbox subscribed (a first request does it)."""
    with pytest.raises(NoRespondersError):
        await inbox_of(connection.client).request(f"test.nobody.{new_id()}", b"", 5)


async def _stored_ids(connection: Connection) -> list[str]:
    js = connection.client.jetstream()
    info = await js.stream_info(subjects.REQUESTS_STREAM)
    ids = []
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        message = await js.get_msg(subjects.REQUESTS_STREAM, seq)
        assert message.headers is not None
        ids.append(message.headers["Nats-Msg-Id"])
    return ids


async def test_a_request_record_sent_at_once_is_acknowledged_with_its_sequence(
    connection: Connection, store: EventStore
) -> None:
    await _subscribed(connection)
    outgoing = prepare_request(CAPABILITY, new_id(), accepted(new_id()))
    acked = store.record_request_now(outgoing)
    assert acked is not None
    seq = await asyncio.wait_for(acked, 30)
    assert store.last_request_sequence >= seq
    message = await connection.client.jetstream().get_msg(subjects.REQUESTS_STREAM, seq)
    assert message.headers is not None
    assert message.headers["Nats-Msg-Id"] == outgoing.envelope.event_id


async def test_a_record_nobody_takes_fails_its_one_attempt(connection: Connection, store: EventStore) -> None:
    await _subscribed(connection)
    outgoing = prepare_request(CAPABILITY, new_id(), accepted(new_id()))
    outgoing.subject = f"test.nostream.{new_id()}"
    acked = store.record_request_now(outgoing)
    assert acked is not None
    with pytest.raises(NoRespondersError):
        await asyncio.wait_for(acked, 30)


async def test_nothing_goes_out_at_once_before_the_reply_inbox_is_subscribed(nats_url: str) -> None:
    fresh = await connect(nats_url, "fresh")
    try:
        outgoing = prepare_request(CAPABILITY, new_id(), accepted(new_id()))
        assert EventStore(fresh).record_request_now(outgoing) is None
    finally:
        await fresh.close()


async def test_a_record_whose_first_attempt_meets_no_stream_lands_once_the_stream_is_there(
    tmp_path: Path,
) -> None:
    # No stream yet: as while MF_REQUESTS elects a leader, nobody answers the first attempt.
    os.chmod(tmp_path, 0o755)
    server = start_nats(tmp_path)
    gateway = await connect(server.url, "records")
    try:
        await _subscribed(gateway)
        ctx = ServingContext(EventStore(gateway), LiveState(), gateway.client, "gateway-a")
        request_id = new_id()
        record_request(ctx, CAPABILITY, request_id, accepted(request_id))
        (first,) = ctx.background
        assert not isinstance(first, asyncio.Task)  # sent with no task
        await asyncio.wait([first], timeout=30)
        with pytest.raises(NoRespondersError):
            first.result()
        (retry,) = ctx.background  # the refusal's callbacks ran first: a retry, in a task
        assert isinstance(retry, asyncio.Task)
        await provision(gateway.client)
        async with asyncio.timeout(60):
            await ctx.settle()
        assert len(await _stored_ids(gateway)) == 1
    finally:
        await gateway.close()
        stop_pid(server.pid)
