"""Asking a late node whether its agent is connected: when, how often, and what an answer proves."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.serving.node_loss import (
    GONE_REASON,
    LIVENESS_MARGIN_S,
    Liveness,
    LostNode,
    next_ask_due,
    nodes_to_ask,
    proven_gone,
    still_to_declare,
)
from gateway.state.catalog import evolve_catalog
from gateway.state.feed import TelemetryFeed
from streams.events import control as c
from tests.unit.gateway.test_node_loss import CATALOG, HOLDING, IDLE, NOW, UP, sample

LATE_S = 5.0 + LIVENESS_MARGIN_S  # the samples' interval and the margin


def test_a_node_late_by_an_interval_and_the_margin_is_asked_about_its_last_sample() -> None:
    assert nodes_to_ask(CATALOG, HOLDING, [sample(age_s=LATE_S - 0.1)], NOW, UP, {}) == []
    late = sample(age_s=LATE_S)
    assert nodes_to_ask(CATALOG, HOLDING, [late], NOW, UP, {}) == [
        LostNode("n1", 3, late.observed_at_unix_ms / 1000, GONE_REASON)
    ]


def test_a_late_node_is_asked_again_an_interval_after_it_was_last_asked() -> None:
    late = sample(age_s=LATE_S + 2)
    asked = {"n1": NOW - 1}  # asked a second ago: it did not answer, or said it was there
    assert nodes_to_ask(CATALOG, HOLDING, [late], NOW, UP, asked) == []
    assert next_ask_due(CATALOG, HOLDING, [late], UP, asked) == NOW - 1 + 5.0
    assert nodes_to_ask(CATALOG, HOLDING, [late], NOW + 4, UP, asked) != []


def test_nodes_holding_nothing_or_that_said_they_stopped_are_not_asked() -> None:
    assert nodes_to_ask(CATALOG, IDLE, [sample(age_s=60.0)], NOW, UP, {}) == []
    assert nodes_to_ask(CATALOG, HOLDING, [sample(age_s=60.0, healthy=False)], NOW, UP, {}) == []


def test_no_node_is_asked_while_the_telemetry_feed_is_down() -> None:
    down = TelemetryFeed(down_since=NOW - 60)
    assert nodes_to_ask(CATALOG, HOLDING, [sample(age_s=60.0)], NOW, down, {}) == []
    assert next_ask_due(CATALOG, HOLDING, [sample(age_s=60.0)], down, {}) is None
    back = TelemetryFeed(up_since=NOW - 1)  # every node gets its whole bound from the feed's return
    assert nodes_to_ask(CATALOG, HOLDING, [sample(age_s=60.0)], NOW, back, {}) == []
    assert next_ask_due(CATALOG, HOLDING, [sample(age_s=60.0)], back, {}) == NOW - 1 + LATE_S


def test_only_no_responders_proves_a_node_gone() -> None:
    asked = [LostNode(f"n{i}", 1, NOW, GONE_REASON) for i in range(3)]
    answers = [Liveness.ANSWERED, Liveness.NO_RESPONDERS, Liveness.NO_ANSWER]
    assert proven_gone(asked, answers) == [asked[1]]


@given(
    age_s=st.floats(min_value=0, max_value=120),
    down_for=st.one_of(st.none(), st.floats(min_value=0, max_value=120)),
)
def test_a_node_is_never_asked_before_its_silence_while_the_feed_was_up_reaches_the_bound(
    age_s: float, down_for: float | None
) -> None:
    feed = UP if down_for is None else TelemetryFeed(up_since=NOW - down_for)
    late = sample(age_s=age_s)
    silent = NOW - max(late.observed_at_unix_ms / 1000, feed.up_since)
    asked = nodes_to_ask(CATALOG, HOLDING, [late], NOW, feed, {})
    assert bool(asked) == (silent >= LATE_S)


def test_a_node_another_replica_declared_lost_while_this_one_asked_is_not_declared_again() -> None:
    # Decided before the question's await; by its answer the view holds the other replica's NodeLost.
    gone = nodes_to_ask(CATALOG, HOLDING, [sample(age_s=7.0)], NOW, UP, {})
    assert [still_to_declare(CATALOG, node) for node in gone] == [True]
    declared = evolve_catalog(
        CATALOG, c.NodeLost(node_id="n1", generation=3, last_seen_at=None, reason="gone")
    )
    assert [still_to_declare(declared, node) for node in gone] == [False]
    restarted = evolve_catalog(declared, c.WorkerStarted(node_id="n1", generation=4))
    assert [still_to_declare(restarted, node) for node in gone] == [False]  # a new worker: not this one
