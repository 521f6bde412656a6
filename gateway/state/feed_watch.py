"""Watching this gateway's telemetry feed: is a silence the nodes' or the bus's?

When no sample has arrived for a quarter of the staleness bound, MF_TELEMETRY is asked for its
state. No answer, an error, or no leader: the feed is down since it was last heard, and node
silence stops counting (`gateway.state.feed`) so that a stream's election or this gateway's lost
connection neither makes every node unschedulable nor declares live nodes lost. A sample, or the
stream answering with a leader, brings it back. It waits on samples with a timeout: while they
flow it asks nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING

from nats.aio.client import Client
from nats.errors import Error as NatsError
from nats.js.client import JetStreamContext

from streams import subjects

if TYPE_CHECKING:
    from gateway.state.live import LiveState

log = logging.getLogger("modelforge.gateway.state")
# A leader answers a stream-info request in milliseconds; a stream electing one does not answer.
PROBE_TIMEOUT_S = 1.0


async def watch_feed(live: LiveState, client: Client) -> None:
    js = client.jetstream(timeout=PROBE_TIMEOUT_S)
    quiet_s = live.telemetry_stale_s / 4
    while True:
        live.telemetry_heard.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(quiet_s):
                await live.telemetry_heard.wait()
                continue
        was_down = live.feed.down_since is not None
        if await _stream_led(js):
            live.heard_from_feed(time.time())
        else:
            live.feed_found_down()
        if was_down != (live.feed.down_since is not None):
            await live.notify()  # the upkeep's node-loss timer and placement's view both change


async def _stream_led(js: JetStreamContext) -> bool:
    """Whether MF_TELEMETRY answers now with a leader (a stream on one server has no cluster)."""
    try:
        info = await js.stream_info(subjects.TELEMETRY_STREAM)
    except (NatsError, TimeoutError):  # no answer, no connection, an API error: nothing comes through
        return False
    return info.cluster is None or info.cluster.leader is not None
