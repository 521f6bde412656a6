"""The live view's node liveness: from the node's own samples, counting its silence only while its
telemetry feed was up."""

from __future__ import annotations

from gateway.state.live import LiveState
from streams.messages import AcceleratorTelemetry

T0 = 1_700_000_000.0


def sampled(
    live: LiveState, at: float, node: str = "n1", accelerator: str = "n1-cpu0", healthy: bool = True
) -> None:
    sample = AcceleratorTelemetry(
        node_id=node, accelerator_id=accelerator, generation=1, total_bytes=1 << 30, used_bytes=0,
        process_bytes=0, observed_at_unix_ms=int(at * 1000), residencies=[], healthy=healthy,
    )  # fmt: skip
    live.apply_telemetry(sample)


def test_a_node_is_live_on_its_own_samples_not_another_nodes() -> None:
    live = LiveState(telemetry_stale_s=10.0)
    live.heard_from_feed(T0)
    sampled(live, T0, node="n2", accelerator="n2-gpu0")
    assert live.node_live("n2", T0)
    assert not live.node_live("n1", T0)  # never heard from


def test_a_node_with_one_fresh_healthy_accelerator_is_live() -> None:
    live = LiveState(telemetry_stale_s=10.0)
    live.heard_from_feed(T0)
    sampled(live, T0, accelerator="n1-gpu0", healthy=False)
    assert not live.node_live("n1", T0)
    sampled(live, T0, accelerator="n1-gpu1")
    assert live.node_live("n1", T0)


def test_an_accelerator_that_reports_from_another_node_counts_for_that_node_only() -> None:
    live = LiveState(telemetry_stale_s=10.0)
    live.heard_from_feed(T0)
    sampled(live, T0, node="n1", accelerator="gpu-a")
    sampled(live, T0 + 1.0, node="n2", accelerator="gpu-a")  # moved (re-registered on n2)
    assert live.node_live("n2", T0 + 1.0)
    assert not live.node_live("n1", T0 + 1.0)


def test_a_node_silent_past_the_bound_on_a_healthy_feed_is_not_live() -> None:
    live = LiveState(telemetry_stale_s=10.0)
    sampled(live, T0)
    live.heard_from_feed(T0)
    assert live.node_live("n1", T0 + 10.0)
    assert not live.node_live("n1", T0 + 10.5)


def test_a_node_silent_while_the_feed_is_down_stays_live() -> None:
    live = LiveState(telemetry_stale_s=10.0)
    sampled(live, T0)
    live.heard_from_feed(T0 + 2.0)
    live.feed_found_down()  # down since it was last heard
    assert live.node_live("n1", T0 + 600.0)


def test_after_the_feed_comes_back_a_silent_node_has_the_whole_bound_again() -> None:
    live = LiveState(telemetry_stale_s=10.0)
    sampled(live, T0)
    live.heard_from_feed(T0 + 2.0)
    live.feed_found_down()
    live.heard_from_feed(T0 + 60.0)  # its stream answered with a leader again
    assert live.node_live("n1", T0 + 70.0)
    assert not live.node_live("n1", T0 + 70.5)
