"""Invokes in flight to a node end when its agent's samples count a drop of its connection."""

from __future__ import annotations

from gateway.state.reconnects import ReconnectWatch
from streams.messages import AcceleratorTelemetry


def sample(
    node: str, reconnects: int, generation: int = 1, accelerator: str = "cpu0"
) -> AcceleratorTelemetry:
    return AcceleratorTelemetry(
        node_id=node, accelerator_id=f"{node}-{accelerator}", generation=generation, total_bytes=1, used_bytes=0,
        process_bytes=0, observed_at_unix_ms=0, residencies=[], healthy=True, reconnects=reconnects,
    )  # fmt: skip


def watched(watch: ReconnectWatch, node: str, key: str) -> list[str]:
    told: list[str] = []
    watch.watch(node, key, lambda: told.append(key))
    return told


def test_a_rise_in_a_nodes_drops_ends_its_watched_invokes_once() -> None:
    watch = ReconnectWatch()
    watch.saw(sample("n1", 0))
    told = watched(watch, "n1", "lease-a")
    watch.saw(sample("n1", 1))
    watch.saw(sample("n1", 2))
    assert told == ["lease-a"]


def test_another_nodes_drop_ends_nothing_here() -> None:
    watch = ReconnectWatch()
    watch.saw(sample("n1", 0))
    watch.saw(sample("n2", 0))
    told = watched(watch, "n1", "lease-a")
    watch.saw(sample("n2", 1))
    assert told == []


def test_the_same_count_from_another_accelerator_ends_nothing() -> None:
    watch = ReconnectWatch()
    watch.saw(sample("n1", 1))
    told = watched(watch, "n1", "lease-a")
    watch.saw(sample("n1", 1, accelerator="cpu1"))
    assert told == []


def test_a_new_generation_starting_its_count_again_ends_nothing() -> None:
    watch = ReconnectWatch()
    watch.saw(sample("n1", 3))
    told = watched(watch, "n1", "lease-a")
    watch.saw(sample("n1", 0, generation=2))
    watch.saw(sample("n1", 0, generation=2))
    assert told == []


def test_an_invoke_no_longer_watched_is_not_told() -> None:
    watch = ReconnectWatch()
    watch.saw(sample("n1", 0))
    told = watched(watch, "n1", "lease-a")
    watch.unwatch("n1", "lease-a")
    watch.saw(sample("n1", 1))
    assert told == []
