"""The global queue counts the other replicas' announced lines while their announcements hold."""

from __future__ import annotations

from gateway.serving.queues import PeerQueues
from streams.messages import QueueDepth


def said(gateway_id: str, depth: int, valid_until_ms: int) -> QueueDepth:
    return QueueDepth(gateway_id=gateway_id, depth=depth, valid_until_unix_ms=valid_until_ms)


def test_the_depth_adds_up_every_other_replicas_line() -> None:
    peers = PeerQueues()
    peers.heard(said("g1", 3, 2_000))
    peers.heard(said("g2", 4, 2_000))
    assert peers.depth(1_000) == 7


def test_a_later_announcement_replaces_the_replicas_earlier_one() -> None:
    peers = PeerQueues()
    peers.heard(said("g1", 3, 2_000))
    peers.heard(said("g1", 0, 2_500))
    assert peers.depth(1_000) == 0


def test_a_replica_that_stopped_announcing_stops_counting_once_its_announcement_lapses() -> None:
    peers = PeerQueues()
    peers.heard(said("vanished", 5, 2_000))
    assert peers.depth(2_000) == 5
    assert peers.depth(2_001) == 0
