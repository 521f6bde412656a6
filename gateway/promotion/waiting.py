"""Waiting for an agent's outcome on an aggregate: subscribe from the version the request was
appended at (catch-up then live, so an outcome that came first is not missed). No polling."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from nats.aio.client import Client

from eventstore.subscription import subscribe
from streams import subjects
from streams.codec import UnknownEvent
from streams.codes import ServingError
from streams.events import Event
from streams.subjects import Aggregate


async def next_event(
    client: Client,
    aggregate: Aggregate,
    aggregate_id: str,
    after_sequence: int,
    matches: Callable[[Event], bool],
    timeout_s: float,
    what: str,
) -> tuple[Event, int]:
    scope = subjects.aggregate_filter(aggregate, aggregate_id)
    try:
        async with asyncio.timeout(timeout_s):
            async for record in subscribe(client, after_sequence + 1, filter_subject=scope):
                event = record.event
                if not isinstance(event, UnknownEvent) and matches(event):
                    return event, record.sequence
    except TimeoutError:
        raise ServingError(
            "REQUEST_TIMEOUT", f"no {what} within {timeout_s:.0f} s; is the node's agent running?"
        ) from None
    raise ServingError("REQUEST_TIMEOUT", f"the subscription for {what} ended")
