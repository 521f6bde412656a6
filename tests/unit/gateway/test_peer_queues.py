"""The global queue counts the other replicas' announced lines while their announcements hold,
timed on the hearing replica's own clock; a replica can wait to hear them."""

from __future__ import annotations

import asyncio

import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg

from gateway.serving.queues import PeerQueues, QueueBoard
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


def _announcement(board: QueueBoard, gateway_id: str, depth: int) -> Msg:
    return Msg(
        board.client, subject=f"mf.queue.{gateway_id}", data=msgspec.json.encode(said(gateway_id, depth))
    )


async def test_a_replica_waiting_to_hear_the_others_lines_wakes_when_they_add_up() -> None:
    board = QueueBoard(Client(), "self")
    waiting = asyncio.ensure_future(board.wait_for_peers(3, timeout=10.0))
    await board._heard(_announcement(board, "g1", 2))
    await asyncio.sleep(0)  # (let the waiter see the first announcement)
    assert not waiting.done()
    await board._heard(_announcement(board, "g2", 1))
    assert await waiting


async def test_a_replica_waiting_on_the_others_does_not_count_its_own_line() -> None:
    board = QueueBoard(Client(), "self")
    waiting = asyncio.ensure_future(board.wait_for_peers(1, timeout=0.05))
    await board._heard(_announcement(board, "self", 4))
    assert not await waiting
