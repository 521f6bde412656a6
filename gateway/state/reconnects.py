"""Invokes in flight to a node whose agent's NATS connection dropped since they were sent.

An agent on a lost nats-server reconnects to another in a moment, but an invoke on its way to it
through the lost server never arrives, and nothing would tell the gateway waiting for its reply
before the deadline. The agent counts its drops in its telemetry (`reconnects`); a rise within a
worker generation ends the invokes in flight to that node (`watch`), which are tried once more.
A new generation is a restarted agent: its node's books are reconciled, which ends them anyway.
"""

from __future__ import annotations

from collections.abc import Callable

from streams.messages import AcceleratorTelemetry


class ReconnectWatch:
    def __init__(self) -> None:
        self._seen: dict[str, tuple[int, int]] = {}  # node id -> (generation, its drops so far)
        self._watchers: dict[str, dict[str, Callable[[], None]]] = {}  # node id -> key -> callback

    def watch(self, node_id: str, key: str, dropped: Callable[[], None]) -> None:
        """Call `dropped` (once) if the node's agent reports a drop of its connection from now on."""
        self._watchers.setdefault(node_id, {})[key] = dropped

    def unwatch(self, node_id: str, key: str) -> None:
        watchers = self._watchers.get(node_id)
        if watchers is not None:
            watchers.pop(key, None)
            if not watchers:
                del self._watchers[node_id]

    def saw(self, sample: AcceleratorTelemetry) -> None:
        """A sample of the node's: tell its watchers if it counts a drop not seen before."""
        before = self._seen.get(sample.node_id)
        if before is not None and before[0] == sample.generation and sample.reconnects <= before[1]:
            return  # (an older sample, or another accelerator's of the same count)
        self._seen[sample.node_id] = (sample.generation, sample.reconnects)
        if before is not None and before[0] == sample.generation:
            for dropped in self._watchers.pop(sample.node_id, {}).values():
                dropped()
