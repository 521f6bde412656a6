"""Feeding a gateway's live view from MF_TELEMETRY: the stored samples, in order (the view's
source of truth for nodes), and each sample as its agent sends it on core NATS, heard only for the
connection drops it reports while the stream may be electing a leader.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import msgspec
from nats.aio.client import Client
from nats.js.api import ConsumerConfig, DeliverPolicy

from gateway.state.senders import forged_telemetry
from streams import subjects
from streams.messages import AcceleratorTelemetry

if TYPE_CHECKING:
    from gateway.state.live import LiveState

log = logging.getLogger("modelforge.gateway.state")
_telemetry_decoder = msgspec.json.Decoder(AcceleratorTelemetry)


async def follow_telemetry(live: LiveState, client: Client) -> None:
    """The stored samples into `live`: the last of each subject first, then each as it is stored."""
    js = client.jetstream()
    # The follower is one ephemeral consumer on one server. If that server goes, nats-py remakes
    # it after two missed heartbeats (and again each two while the stream elects a leader):
    # heartbeats a tenth of the staleness bound leave room for that before every node reads as
    # down (NO_ELIGIBLE_NODE); nats-py's default (5 s) did not.
    sub = await js.subscribe(
        f"{subjects.TELEMETRY_PREFIX}.>",
        stream=subjects.TELEMETRY_STREAM,
        ordered_consumer=True,
        idle_heartbeat=live.telemetry_stale_s / 10,
        config=ConsumerConfig(deliver_policy=DeliverPolicy.LAST_PER_SUBJECT),
    )
    try:
        async for msg in sub.messages:
            live.heard_from_feed(time.time())
            live.telemetry_seq = msg.metadata.sequence.stream
            try:
                sample = _telemetry_decoder.decode(msg.data)
            except msgspec.DecodeError:
                log.warning("ignoring malformed telemetry on %s", msg.subject)
            else:
                live.apply_sample(msg.subject, live.telemetry_seq, sample)
            await live.notify()
    finally:
        await sub.unsubscribe()  # and its heartbeat task, which a closed connection ends only later


async def hear_drops(live: LiveState, client: Client) -> None:
    """Each sample as its agent sends it, on core NATS, for the drops it reports alone
    (`ReconnectWatch`): the stream delivers a sample only once it has a leader, and when the
    server that led it is lost, an agent that was on that server has invokes in flight that
    never arrive; heard here, they are tried again at once rather than after the election."""
    sub = await client.subscribe(f"{subjects.TELEMETRY_PREFIX}.>")
    try:
        async for msg in sub.messages:
            try:
                sample = _telemetry_decoder.decode(msg.data)
            except msgspec.DecodeError:
                continue  # (the stream's follower logs it)
            if forged_telemetry(msg.subject, 0, sample, live.catalog) is None:
                live.reconnects.saw(sample)
    finally:
        await sub.unsubscribe()
