"""`UsageMarks`: a key's use is recorded at most once an interval per credential, not per request."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from gateway.clients.usage import UsageMarks


def test_the_first_use_of_a_credential_is_recorded() -> None:
    assert UsageMarks(60.0).due("cred_a", 1000.0)


def test_a_further_use_within_the_interval_is_not_recorded() -> None:
    marks = UsageMarks(60.0)
    marks.due("cred_a", 1000.0)

    assert not marks.due("cred_a", 1059.9)


def test_a_use_once_the_interval_has_passed_is_recorded_again() -> None:
    marks = UsageMarks(60.0)
    marks.due("cred_a", 1000.0)

    assert marks.due("cred_a", 1060.0)


def test_each_credential_is_recorded_on_its_own() -> None:
    marks = UsageMarks(60.0)
    marks.due("cred_a", 1000.0)

    assert marks.due("cred_b", 1001.0)


@given(st.lists(st.floats(min_value=0, max_value=3600, allow_nan=False), max_size=200))
def test_recorded_uses_are_never_closer_than_the_interval(offsets: list[float]) -> None:
    marks = UsageMarks(60.0)
    recorded = [now for now in sorted(offsets) if marks.due("cred_a", now)]

    assert all(later - earlier >= 60.0 for earlier, later in itertools.pairwise(recorded))
    assert len(recorded) <= 3600 // 60 + 1
