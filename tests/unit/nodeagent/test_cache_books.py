"""A node's artifact cache keeps within its budget by evicting least recently used sets, never one a
worker holds, and refuses a set that cannot fit with a stable code."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodeagent.agent.cache_books import CacheBooks
from streams.codes import ServingError

SIZES = st.lists(st.integers(min_value=1, max_value=100), min_size=0, max_size=8)


def books_with(budget: int, sizes: list[int]) -> CacheBooks:
    books = CacheBooks(budget)
    for index, size in enumerate(sizes):
        books.add(f"as-{index}", size)
    return books


def test_room_is_made_by_evicting_the_least_recently_used_sets_first() -> None:
    books = books_with(100, [40, 40])
    books.touch("as-0")
    assert books.make_room("as-new", 50, frozenset()) == ["as-1"]


def test_a_set_a_worker_holds_is_never_evicted() -> None:
    books = books_with(100, [40, 40])
    assert books.make_room("as-new", 50, frozenset({"as-0"})) == ["as-1"]


def test_a_set_larger_than_the_budget_is_refused_with_the_cache_code() -> None:
    with pytest.raises(ServingError) as refused:
        CacheBooks(100).make_room("as-big", 101, frozenset())
    assert refused.value.code == "ARTIFACT_SET_EXCEEDS_CACHE"


def test_a_set_that_only_held_sets_keep_from_fitting_is_refused_and_nothing_is_evicted() -> None:
    books = books_with(100, [60])
    with pytest.raises(ServingError) as refused:
        books.make_room("as-new", 50, frozenset({"as-0"}))
    assert refused.value.code == "ARTIFACT_SET_EXCEEDS_CACHE"
    assert books.set_ids() == ["as-0"]


@given(sizes=SIZES, size=st.integers(min_value=1, max_value=100), held_mask=st.integers(0, 255))
def test_after_making_room_the_cache_fits_its_budget_and_held_sets_stay(
    sizes: list[int], size: int, held_mask: int
) -> None:
    budget = 100
    books, size_of = CacheBooks(budget), {}
    for index, set_size in enumerate(sizes):  # as fetched, each within room made for it
        try:
            for evicted in books.make_room(f"as-{index}", set_size, frozenset()):
                books.remove(evicted)
        except ServingError:
            continue
        books.add(f"as-{index}", set_size)
        size_of[f"as-{index}"] = set_size
    held = frozenset(s for i, s in enumerate(books.set_ids()) if held_mask >> i & 1)
    try:
        evicted = books.make_room("as-new", size, held)
    except ServingError:
        assert size > budget - sum(size_of[s] for s in held)
        return
    assert not held & set(evicted)
    for gone in evicted:
        books.remove(gone)
    books.add("as-new", size)
    assert books.used_bytes <= budget
    assert held <= set(books.set_ids())
