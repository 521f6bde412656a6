"""How long a node has been silent, counting only time this gateway's telemetry feed was up."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.state.feed import TelemetryFeed, feed_down, feed_up, silent_for, silent_past

T0 = 1_700_000_000.0
times = st.floats(min_value=T0, max_value=T0 + 3_600.0, allow_nan=False)
spans = st.floats(min_value=0.0, max_value=600.0, allow_nan=False)


@st.composite
def feeds(draw: st.DrawFn) -> TelemetryFeed:
    up_since = draw(st.sampled_from([0.0, draw(times)]))
    down = draw(st.booleans())
    return TelemetryFeed(down_since=draw(times) if down else None, up_since=up_since)


def test_with_the_feed_always_up_silence_is_the_samples_age() -> None:
    assert silent_for(T0, TelemetryFeed(), T0 + 12.5) == 12.5


def test_silence_stops_counting_when_the_feed_goes_down() -> None:
    down = feed_down(TelemetryFeed(), last_heard=T0 + 3.0)
    assert silent_for(T0, down, T0 + 60.0) == 3.0


def test_silence_counts_again_from_the_feeds_return() -> None:
    back = feed_up(feed_down(TelemetryFeed(), T0 + 3.0), now=T0 + 40.0)
    assert silent_for(T0, back, T0 + 45.0) == 5.0


def test_a_feed_found_down_again_keeps_when_it_was_last_heard() -> None:
    down = feed_down(TelemetryFeed(), T0 + 3.0)
    assert feed_down(down, T0 + 9.0) == down


def test_a_feed_heard_while_up_is_unchanged() -> None:
    assert feed_up(TelemetryFeed(up_since=T0), T0 + 5.0) == TelemetryFeed(up_since=T0)


@given(observed=times, feed=feeds(), now=times)
def test_silence_is_never_more_than_the_samples_age_nor_negative(
    observed: float, feed: TelemetryFeed, now: float
) -> None:
    assert 0.0 <= silent_for(observed, feed, now) <= max(0.0, now - observed)


@given(observed=times, feed=feeds(), now=times, later=spans)
def test_silence_never_shrinks_as_time_goes_on(
    observed: float, feed: TelemetryFeed, now: float, later: float
) -> None:
    assert silent_for(observed, feed, now + later) >= silent_for(observed, feed, now)


@given(observed=times, last_heard=times, since=spans, later=spans)
def test_while_the_feed_is_down_silence_does_not_grow(
    observed: float, last_heard: float, since: float, later: float
) -> None:
    down = feed_down(TelemetryFeed(), last_heard)
    now = last_heard + since
    assert silent_for(observed, down, now + later) == silent_for(observed, down, now)


@given(observed=times, feed=feeds(), bound=st.floats(min_value=0.1, max_value=600.0))
def test_silent_past_is_when_silence_reaches_the_bound(
    observed: float, feed: TelemetryFeed, bound: float
) -> None:
    # the upkeep's timer and the loss rule agree: due when silence reaches the bound, never while down
    due = silent_past(observed, bound, feed)
    if feed.down_since is not None:
        assert due == float("inf")
    else:
        assert silent_for(observed, feed, due - 0.01) < bound <= silent_for(observed, feed, due + 0.01)
