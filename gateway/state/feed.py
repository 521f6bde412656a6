"""Whether a node's silence is the node's or the bus's: pure rules over the telemetry feed's gaps.

Nodes show they are alive by telemetry samples through MF_TELEMETRY. While this gateway's feed of
that stream is interrupted (the stream electing a leader after a server's loss, the gateway's
connection down), no node's sample can reach it, so that time says nothing about any node. A
node's silence therefore counts only time the feed was up: its clock stops when the feed is found
down and starts again when it comes back, from the feed's return or the node's last sample,
whichever is later (every node gets its whole freshness bound to be heard again). A node that dies
while the bus is healthy is still stale, and lost, exactly as soon as before.
"""

from __future__ import annotations

import math

import msgspec


class TelemetryFeed(msgspec.Struct, frozen=True):
    """This gateway's feed of node telemetry. Times in POSIX seconds."""

    down_since: float | None = None  # when it was last heard before it was found down; None: up
    up_since: float = 0.0  # when it last came back (0: never down)


def feed_down(feed: TelemetryFeed, last_heard: float) -> TelemetryFeed:
    """The feed found down (nothing heard, and the stream unreachable or leaderless): down from when
    it was last heard, as nothing since can be told from an outage. A feed already down stays so."""
    return feed if feed.down_since is not None else TelemetryFeed(last_heard, feed.up_since)


def feed_up(feed: TelemetryFeed, now: float) -> TelemetryFeed:
    """The feed heard from again (a sample, or its stream answering with a leader) at `now`."""
    return feed if feed.down_since is None else TelemetryFeed(None, now)


def silent_for(observed_at: float, feed: TelemetryFeed, now: float) -> float:
    """How long a node whose last sample was taken at `observed_at` has been silent while the feed
    could have carried its samples (never negative: a sample from an agent's clock ahead is fresh)."""
    end = now if feed.down_since is None or feed.down_since > now else feed.down_since
    start = observed_at if observed_at >= feed.up_since else feed.up_since
    return end - start if end > start else 0.0


def silent_past(observed_at: float, bound_s: float, feed: TelemetryFeed) -> float:
    """When a node whose last sample was taken at `observed_at` will have been silent for `bound_s`
    (POSIX seconds): never while the feed is down."""
    if feed.down_since is not None:
        return math.inf
    return max(observed_at, feed.up_since) + bound_s
