"""A replica's share of a client's limits while a limit stream has no leader: its size, what it
admits, and the units owed to the shared counter afterwards."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.clients.shares import LocalRate, LocalSlots, rate_share, slot_share


def test_the_rate_share_is_a_quarter_of_the_rpm_rounded_up() -> None:
    assert rate_share(rpm=100, seen_total=None) == 25
    assert rate_share(rpm=10, seen_total=None) == 3


def test_every_client_has_a_rate_share() -> None:
    assert rate_share(rpm=1, seen_total=None) == 1


def test_the_rate_share_is_at_most_what_the_last_seen_total_leaves() -> None:
    assert rate_share(rpm=100, seen_total=90) == 10


def test_a_client_seen_at_its_rate_has_no_share() -> None:
    assert rate_share(rpm=100, seen_total=104) == 0


def test_the_slot_share_is_a_quarter_of_the_concurrency_rounded_up() -> None:
    assert slot_share(max_concurrency=8, held=0) == 2
    assert slot_share(max_concurrency=1, held=0) == 1


def test_the_slot_share_is_at_most_what_the_replicas_stored_slots_leave() -> None:
    assert slot_share(max_concurrency=4, held=4) == 0


def test_the_rate_share_admits_until_it_is_used_up() -> None:
    rate = LocalRate()
    assert [rate.take("cl_a", 7, share=2) for _ in range(3)] == [True, True, False]


def test_a_new_window_has_its_own_share() -> None:
    rate = LocalRate()
    assert rate.take("cl_a", 7, share=1)
    assert rate.take("cl_a", 8, share=1)


def test_admitted_units_are_owed_to_their_windows_counter() -> None:
    rate = LocalRate()
    for window in (7, 7, 8):
        rate.take("cl_a", window, share=5)
    assert sorted(rate.drain()) == [("cl_a", 7, 2), ("cl_a", 8, 1)]
    assert rate.drain() == []


def test_a_unit_given_back_is_not_owed() -> None:
    rate = LocalRate()
    rate.take("cl_a", 7, share=5)
    rate.give_back("cl_a", 7)
    assert rate.drain() == []
    assert rate.take("cl_a", 7, share=1)


def test_a_unit_given_back_after_its_publish_is_owed_as_minus_one() -> None:
    rate = LocalRate()
    rate.take("cl_a", 7, share=5)
    rate.drain()
    rate.give_back("cl_a", 7)
    assert rate.drain() == [("cl_a", 7, -1)]


def test_a_failed_publish_is_owed_again() -> None:
    rate = LocalRate()
    rate.take("cl_a", 7, share=5)
    for client, window, units in rate.drain():
        rate.restore(client, window, units)
    assert rate.drain() == [("cl_a", 7, 1)]


def test_local_slots_are_held_up_to_the_share_and_freed_one_by_one() -> None:
    slots = LocalSlots()
    assert [slots.take("g", share=2) for _ in range(3)] == [True, True, False]
    slots.free("g")
    assert slots.in_use("g") == 1
    assert slots.take("g", share=2)


# ---- properties --------------------------------------------------------------------------------

steps = st.lists(st.sampled_from(["take", "give_back", "drain", "fail"]), max_size=60)


@given(steps=steps, share=st.integers(min_value=0, max_value=10))
def test_never_admits_more_than_its_share_at_once(steps: list[str], share: int) -> None:
    rate, admitted = LocalRate(), 0
    for step in steps:
        if step == "take":
            admitted += rate.take("cl_a", 7, share)
        elif step == "give_back" and admitted:
            rate.give_back("cl_a", 7)
            admitted -= 1
        assert admitted <= share


@given(steps=steps)
def test_owed_units_are_published_exactly_once(steps: list[str]) -> None:
    """Whatever the order of admissions, give-backs, publishes and failed publishes, what was
    published plus what is still owed is exactly what stands admitted: never counted twice."""
    rate, admitted, published = LocalRate(), 0, 0
    for step in steps:
        if step == "take":
            admitted += rate.take("cl_a", 7, share=100)
        elif step == "give_back" and admitted:
            rate.give_back("cl_a", 7)
            admitted -= 1
        elif step == "drain":
            published += sum(units for _, _, units in rate.drain())
        elif step == "fail":
            for client, window, units in rate.drain():
                rate.restore(client, window, units)
        assert published + sum(units for _, _, units in _peek(rate)) == admitted


@given(takes=st.integers(min_value=0, max_value=30), share=st.integers(min_value=0, max_value=10))
def test_local_slots_never_exceed_the_share(takes: int, share: int) -> None:
    slots = LocalSlots()
    for _ in range(takes):
        slots.take("g", share)
    assert slots.in_use("g") <= share


@given(rpm=st.integers(min_value=1, max_value=10**6), seen=st.none() | st.integers(0, 2 * 10**6))
def test_a_rate_share_never_reaches_past_the_rpm_left(rpm: int, seen: int | None) -> None:
    share = rate_share(rpm, seen)
    assert 0 <= share <= rpm - (seen or 0) or share == 0


def _peek(rate: LocalRate) -> list[tuple[str, int, int]]:
    drained = rate.drain()
    for client, window, units in drained:
        rate.restore(client, window, units)
    return drained
