"""The global queue counts the other replicas' announced lines while their announcements hold,
timed on the hearing replica's own clock."""

from __future__ import annotations

from gateway.serving.queues import PeerQueues
from streams.messages import QueueDepth


def said(gateway_id: str, depth: int, valid_for_ms: int = 5_000) -> QueueDepth:
    return QueueDepth(gateway_id=gateway_id, depth=depth, valid_for_ms=valid_for_ms)


def test_the_depth_adds_up_every_other_replicas_line() -> None:
    peers = PeerQueues()
    peers.heard(said("g1", 3), now_ms=1_000)
    peers.heard(said("g2", 4), now_ms=1_000)
    assert peers.depth(1_500) == 7


def test_a_later_announcement_replaces_the_replicas_earlier_one() -> None:
    peers = PeerQueues()
    peers.heard(said("g1", 3), now_ms=1_000)
    peers.heard(said("g1", 0), now_ms=1_200)
    assert peers.depth(1_500) == 0


def test_a_replica_that_stopped_announcing_stops_counting_once_its_announcement_lapses() -> None:
    peers = PeerQueues()
    peers.heard(said("vanished", 5, valid_for_ms=1_000), now_ms=1_000)
    assert peers.depth(2_000) == 5
    assert peers.depth(2_001) == 0


def test_replicas_whose_announcements_lapsed_are_forgotten_when_another_is_heard() -> None:
    peers = PeerQueues()
    peers.heard(said("restarted-long-ago", 5, valid_for_ms=1_000), now_ms=1_000)
    peers.heard(said("g1", 1), now_ms=3_000)
    assert list(peers._latest) == ["g1"]
