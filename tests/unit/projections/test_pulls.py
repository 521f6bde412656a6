"""How many pulls a stream reader keeps asked for (`projections.source.pull_wanted`): one waiting
while idle, a second once the first is half taken."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from projections.source import PULL_BATCH, pull_wanted


def test_a_reader_with_nothing_asked_for_sends_one_pull() -> None:
    assert pull_wanted(0)


def test_an_idle_reader_with_a_pull_partly_taken_sends_no_second_one() -> None:
    assert not pull_wanted(PULL_BATCH - 3)


def test_a_reader_whose_pull_is_half_taken_sends_the_next() -> None:
    assert pull_wanted(PULL_BATCH // 2)


@given(st.lists(st.integers(min_value=0, max_value=PULL_BATCH), max_size=50))
def test_a_reader_never_has_more_than_a_pull_and_a_half_asked_for(takes: list[int]) -> None:
    outstanding = 0
    for taken in takes:
        if pull_wanted(outstanding):
            outstanding += PULL_BATCH
        assert outstanding <= PULL_BATCH * 3 // 2
        outstanding -= min(taken, outstanding)
