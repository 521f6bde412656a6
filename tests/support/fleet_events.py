"""What the fleet's streams say, each event with the time its stream stored it (a retried append
shows when it landed, not when it was first tried): for tests.support.fleet, its test and its bench."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import msgspec
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.api import ConsumerConfig, DeliverPolicy
from nats.js.client import JetStreamContext

from eventstore import reading
from eventstore.connection import Connection
from eventstore.records import record_from
from eventstore.replies import resend_while_leaderless
from gateway.scheduler.overcommit import excess_bytes
from gateway.state.live import LiveState
from streams import subjects
from streams.codec import UnknownEvent
from streams.events import Event
from streams.events import serving as s
from streams.events.requests import RequestCompleted
from tests.support.agents import WAIT_S

T = TypeVar("T")


class StoredEvent(msgspec.Struct, frozen=True):
    sequence: int
    stored: float  # when the stream stored it (POSIX s): a retried append shows when it landed
    event: Event


async def stored_until(
    connection: Connection, stream: str, from_sequence: int, done: Callable[[StoredEvent], bool]
) -> list[StoredEvent]:
    """The stream's events from `from_sequence` on, each with the time it was stored, up to and
    including the first for which `done` holds (waiting for it: fails after WAIT_S)."""
    js = connection.client.jetstream()
    found: list[StoredEvent] = []

    def subscribe() -> Awaitable[JetStreamContext.PushSubscription]:
        return js.subscribe(
            f"{subjects.EVENTS_PREFIX}.>" if stream == subjects.EVENTS_STREAM else ">",
            stream=stream,
            ordered_consumer=True,
            config=ConsumerConfig(
                deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=from_sequence
            ),
            pending_msgs_limit=-1,
            pending_bytes_limit=-1,
        )

    sub = await _once_led(subscribe)
    try:
        async with asyncio.timeout(WAIT_S):
            async for msg in sub.messages:
                meta = msg.metadata
                record = record_from(meta.sequence.stream, msg.subject, msg.headers, msg.data)
                if isinstance(record.event, UnknownEvent):
                    continue
                found.append(StoredEvent(meta.sequence.stream, meta.timestamp.timestamp(), record.event))
                if done(found[-1]):
                    return found
    finally:
        await sub.unsubscribe()
    raise AssertionError("unreachable: the subscription never ends")


async def stored_events(connection: Connection, stream: str, from_sequence: int) -> list[StoredEvent]:
    """The stream's events from `from_sequence` to its last now."""
    last = await last_sequence(connection, stream)
    if last < from_sequence:
        return []
    return await stored_until(connection, stream, from_sequence, lambda stored: stored.sequence >= last)


async def last_sequence(connection: Connection, stream: str) -> int:
    return (await _once_led(lambda: connection.client.jetstream().stream_info(stream))).state.last_seq


async def _once_led(ask: Callable[[], Awaitable[T]]) -> T:
    """`ask()` of a stream's leader, asked again while the stream elects one (fails after WAIT_S):
    a test reads the stream right after killing the server that led it, and a leaderless stream's
    API request may go unanswered (a timeout) as well as find no responders."""
    give_up = time.monotonic() + WAIT_S
    while True:
        try:
            return await resend_while_leaderless(ask, give_up - time.monotonic())
        except NatsTimeoutError:
            if time.monotonic() >= give_up:
                raise


async def loaded_on(
    connection: Connection, deployment_id: str, count: int, from_sequence: int = 1
) -> set[str]:
    """Wait until the deployment is loaded on `count` accelerators (ResidencyLoaded from
    `from_sequence` on) and return them."""
    loaded: set[str] = set()

    def enough(stored: StoredEvent) -> bool:
        event = stored.event
        if isinstance(event, s.ResidencyLoaded) and event.deployment_id == deployment_id:
            loaded.add(event.accelerator_id)
        return len(loaded) >= count

    await stored_until(connection, subjects.EVENTS_STREAM, from_sequence, enough)
    return loaded


async def completions(connection: Connection, since: int, served: set[str]) -> list[RequestCompleted]:
    """Wait until every request in `served` has its RequestCompleted (fails after WAIT_S); those
    stored from `since` on, in stream order."""
    missing = set(served)

    def all_in(stored: StoredEvent) -> bool:
        if isinstance(stored.event, RequestCompleted):
            missing.discard(stored.event.request_id)
        return not missing

    if not missing:
        return []
    found = await stored_until(connection, subjects.REQUESTS_STREAM, since, all_in)
    return [e.event for e in found if isinstance(e.event, RequestCompleted) and e.event.request_id in served]


async def lease_ends(connection: Connection, since: int, requests: set[str]) -> dict[str, float]:
    """When the last lease granted to each of `requests` ended (stored: its release, its expiry, or
    its accelerator's reconciliation), once every one has (fails after WAIT_S)."""
    grants: dict[str, s.LeaseGranted] = {}
    open_at: dict[str, set[str]] = {}  # accelerator -> leases not ended
    ended: dict[str, float] = {}
    last = await last_sequence(connection, subjects.EVENTS_STREAM)

    def settled(stored: StoredEvent) -> bool:
        match stored.event:
            case s.LeaseGranted(request_id=request) as grant if request in requests:
                grants[grant.lease_id] = grant
                open_at.setdefault(grant.accelerator_id, set()).add(grant.lease_id)
            case s.LeaseReleased(lease_id=lease) | s.LeaseExpired(lease_id=lease) if lease in grants:
                open_at[grants[lease].accelerator_id].discard(lease)
                ended[grants[lease].request_id] = stored.stored
            case s.ResidencyReconciled(accelerator_id=accelerator):
                for lease in open_at.pop(accelerator, set()):
                    ended[grants[lease].request_id] = stored.stored
        return stored.sequence >= last and not any(open_at.values())

    await stored_until(connection, subjects.EVENTS_STREAM, since, settled)
    return ended


async def over_commits(connection: Connection) -> list[tuple[int, str]]:
    """Replay MF_EVENTS from its first event into a fresh live view: (sequence, accelerator) of each
    event after which that accelerator's books held more than is schedulable (resident + leased >
    total - reserve), under the scheduler policy in force."""
    view, over = LiveState(), []
    everything = f"{subjects.EVENTS_PREFIX}.>"
    async for batch in reading.batches(connection.client, subjects.EVENTS_STREAM, everything):
        for record in batch:
            view.apply(record)
            envelope = record.envelope
            if envelope is None or envelope.aggregate_type != subjects.Aggregate.ACCELERATOR.value:
                continue
            state = view.accelerators.get(envelope.aggregate_id)
            if (
                state is not None
                and isinstance(record.event, s.LeaseGranted)
                and excess_bytes(state, view.policy)
            ):
                over.append((record.sequence, envelope.aggregate_id))
    return over
