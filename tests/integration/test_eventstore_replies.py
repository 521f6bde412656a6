"""`ReplyInbox`: request-reply on one wildcard inbox behaves like `Client.request`."""

from __future__ import annotations

import asyncio

import pytest
from nats.aio.msg import Msg
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

from eventstore.connection import Connection
from eventstore.replies import ReplyInbox, inbox_of, reply
from streams.envelope import new_id


async def _responder(connection: Connection, subject: str, answer: bool = True) -> None:
    async def echo(msg: Msg) -> None:
        if answer:
            await connection.client.publish(msg.reply, b"re:" + msg.data)

    await connection.client.subscribe(subject, cb=echo)
    await connection.client.flush()


async def test_a_request_gets_its_own_reply_among_many_in_flight(connection: Connection) -> None:
    subject = f"test.echo.{new_id()}"
    await _responder(connection, subject)
    inbox = ReplyInbox(connection.client)
    replies = await asyncio.gather(*(inbox.request(subject, str(i).encode(), 5) for i in range(200)))
    assert [m.data for m in replies] == [f"re:{i}".encode() for i in range(200)]


async def test_requests_sent_before_waiting_are_answered_in_order(connection: Connection) -> None:
    subject = f"test.echo.{new_id()}"
    await _responder(connection, subject)
    inbox = inbox_of(connection.client)
    first = await inbox.send(subject, b"1", 5)
    second = await inbox.send(subject, b"2", 5)
    assert (await reply(second)).data == b"re:2"
    assert (await reply(first)).data == b"re:1"


async def test_no_subscriber_is_no_responders(connection: Connection) -> None:
    with pytest.raises(NoRespondersError):
        await inbox_of(connection.client).request(f"test.nobody.{new_id()}", b"x", 5)


async def test_no_reply_within_the_timeout_is_a_nats_timeout(connection: Connection) -> None:
    subject = f"test.silent.{new_id()}"
    await _responder(connection, subject, answer=False)
    inbox = ReplyInbox(connection.client)
    with pytest.raises(NatsTimeoutError):
        await inbox.request(subject, b"x", 0.2)
    assert not inbox._waiting  # nothing left behind


async def test_a_cancelled_request_leaves_nothing_waiting(connection: Connection) -> None:
    subject = f"test.silent.{new_id()}"
    await _responder(connection, subject, answer=False)
    inbox = ReplyInbox(connection.client)
    pending = await inbox.send(subject, b"x", 30)
    assert inbox._waiting
    pending.cancel()  # what cancelling a task awaiting `reply(pending)` does to it
    await asyncio.sleep(0)  # done callbacks run on the loop's next turn
    assert not inbox._waiting


async def test_one_inbox_per_client(connection: Connection) -> None:
    assert inbox_of(connection.client) is inbox_of(connection.client)


async def test_a_reply_is_handed_to_its_request_by_the_reader_with_no_task_between(
    connection: Connection,
) -> None:
    """nats-py's reader resolves the waiting future itself: the inbox's subscription runs no task
    of its own, and nothing waits in its queue once the replies are in."""
    subject = f"test.echo.{new_id()}"
    await _responder(connection, subject)
    inbox = ReplyInbox(connection.client)
    replies = await asyncio.gather(*(inbox.request(subject, b"x", 5) for _ in range(20)))
    assert len(replies) == 20
    assert inbox._subscribing is not None
    subscription = inbox._subscribing.result()
    assert subscription._wait_for_msgs_task is None
    assert (subscription.pending_msgs, subscription.pending_bytes) == (0, 0)
