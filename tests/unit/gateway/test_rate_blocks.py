"""Counting a client's rate in blocks: how large a block, which of its units admit, and who holds them."""

from __future__ import annotations

from gateway.clients.rate_blocks import BLOCK_MOST, RateBlocks, block_size, counts_in_blocks, usable


def test_a_client_far_below_half_its_rate_is_counted_a_block_at_a_time() -> None:
    assert block_size(rpm=1_000_000, seen_total=10) == BLOCK_MOST


def test_a_client_whose_total_is_unknown_is_counted_one_unit() -> None:
    assert block_size(rpm=1_000_000, seen_total=None) == 1


def test_a_client_a_block_would_take_past_half_its_rate_is_counted_one_unit() -> None:
    assert block_size(rpm=1024, seen_total=500) == 1


def test_a_block_is_a_small_share_of_a_small_rate() -> None:
    assert block_size(rpm=256, seen_total=0) == 4


def test_a_rate_too_small_for_blocks_is_counted_one_unit_a_request() -> None:
    assert not counts_in_blocks(100)
    assert block_size(rpm=100, seen_total=0) == 1


def test_every_unit_of_a_block_within_the_rate_admits() -> None:
    assert usable(rpm=100, total=40, counted=16) == 16


def test_only_the_units_at_most_the_rate_admit() -> None:
    assert usable(rpm=100, total=104, counted=16) == 12


def test_a_block_wholly_past_the_rate_admits_none() -> None:
    assert usable(rpm=100, total=130, counted=16) == 0


def test_held_units_are_taken_one_a_request_until_none_is_left() -> None:
    blocks = RateBlocks()
    blocks.keep("cl_a", window=7, units=2)
    assert [blocks.take("cl_a", 7) for _ in range(3)] == [True, True, False]


def test_units_of_an_earlier_window_are_not_taken() -> None:
    blocks = RateBlocks()
    blocks.keep("cl_a", window=7, units=3)
    assert not blocks.take("cl_a", 8)
    blocks.keep("cl_a", window=8, units=1)
    assert blocks.held("cl_a", 8) == 1


def test_units_are_held_per_client() -> None:
    blocks = RateBlocks()
    blocks.keep("cl_a", window=7, units=3)
    assert not blocks.take("cl_b", 7)
