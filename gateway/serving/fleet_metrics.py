"""The agents' metrics, fleet-wide, on the gateway's `/metrics`: each agent sends a snapshot of its
own families (`modelforge_agent_*`, Prometheus text) with every telemetry round on core NATS
(`mf.metrics.<node>`); the gateway keeps each node's latest, and a scrape shows them for the
nodes that are live now, every sample labelled `node`. A scraper needs to reach only the gateway,
not every agent's port.

A snapshot is parsed by the first scrape that shows it, not as it arrives: every node sends one
every telemetry round (~0.5 ms of parsing each), and scrapes come less often, or never. What it
holds is checked then: text that does not parse, or a family not of the agent's own, is left out
(and logged), and the node's last good snapshot is shown instead, so no agent can shadow the
gateway's own series.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from streams import subjects

log = logging.getLogger("modelforge.gateway.fleet_metrics")
AGENT_PREFIX = "modelforge_agent_"
MAX_SNAPSHOT_BYTES = 1 << 20


def parsed(text: str) -> list[Metric]:
    """The agent families in one snapshot; ValueError when it does not parse or holds another's."""
    families = list(text_string_to_metric_families(text))
    for family in families:
        if not family.name.startswith(AGENT_PREFIX):
            raise ValueError(f"family {family.name!r} is not an agent's")
    return families


def merged(snapshots: dict[str, list[Metric]]) -> list[Metric]:
    """One family per name across nodes, each sample labelled with its node (node id order)."""
    families: dict[str, Metric] = {}
    for node in sorted(snapshots):
        for family in snapshots[node]:
            into = families.get(family.name)
            if into is None:
                into = families[family.name] = Metric(
                    family.name, family.documentation, family.type, family.unit
                )
            for sample in family.samples:
                into.add_sample(sample.name, {**sample.labels, "node": node}, sample.value, sample.timestamp)
    return list(families.values())


class FleetMetrics(Collector):
    """The latest snapshot per node, shown while `live(node)` holds (a lost node drops out)."""

    def __init__(self, client: Client, live: Callable[[str], bool]) -> None:
        self.client, self.live = client, live
        self._arrived: dict[str, bytes] = {}  # each node's latest snapshot, not yet parsed
        self._shown: dict[str, list[Metric]] = {}  # each node's last snapshot that parsed
        self._lock = threading.Lock()  # a scrape may collect on another thread
        self._subscription: Subscription | None = None

    async def start(self) -> None:
        self._subscription = await self.client.subscribe(f"{subjects.AGENT_METRICS_PREFIX}.*", cb=self._heard)

    async def close(self) -> None:
        if self._subscription is not None:
            await self._subscription.unsubscribe()
            self._subscription = None

    async def _heard(self, msg: Msg) -> None:
        node = msg.subject.rsplit(".", 1)[-1]
        if len(msg.data) > MAX_SNAPSHOT_BYTES:
            log.warning("metrics snapshot of node %s left out: %d bytes", node, len(msg.data))
            return
        with self._lock:
            self._arrived[node] = msg.data

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            arrived, self._arrived = self._arrived, {}
        good: dict[str, list[Metric]] = {}
        for node, data in arrived.items():
            try:
                good[node] = parsed(data.decode())
            except Exception as error:  # whatever the parser raises on odd text: that snapshot only
                log.warning("metrics snapshot of node %s left out: %s", node, error)
        with self._lock:
            self._shown.update(good)
            shown = dict(self._shown)
        yield from merged({node: families for node, families in shown.items() if self.live(node)})
