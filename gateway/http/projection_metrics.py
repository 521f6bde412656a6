"""The projection's standing as Prometheus gauges on the gateway's `/metrics`, per projected
stream: events behind the stream's last sequence, seconds since the projector last applied one,
and whether it halted. Read at scrape time (two read-model queries and a stream-info request per
stream: cheap at a scrape interval), within `READ_S`; without a read model (no DATABASE_URL), or
while it cannot be read, the families are left out rather than guessed (and the failure logged).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from datetime import datetime

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.http.edge import Edge
from gateway.projection_state import halted_streams, stream_positions

log = logging.getLogger("modelforge.gateway.metrics")
READ_S = 2.0


class _Read(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        yield from self._families


async def scraped(edge: Edge) -> CollectorRegistry:
    """What one scrape of `/metrics` shows: the replica's registry, the client limits', the agents'
    metrics by node and the projection's gauges."""
    registry = CollectorRegistry(auto_describe=False)  # (no name checks: none share a family name)
    registry.register(edge.ctx.metrics.registry)
    registry.register(edge.limiter.metrics)  # the client limits' own (shares while leaderless)
    if edge.fleet_metrics is not None:
        registry.register(edge.fleet_metrics)
    registry.register(_Read(await projection_families(edge)))
    return registry


async def projection_families(edge: Edge) -> list[Metric]:
    model = edge.read_models.get()
    if model is None:
        return []
    try:
        async with asyncio.timeout(READ_S):
            positions = await stream_positions(model, edge.ctx.client.jetstream())
            halted = {row["stream"] for row in await halted_streams(model)}
    except Exception as failure:  # a scrape must still answer: the other families are what it has
        log.warning("projection metrics left out: %s", type(failure).__name__)
        return []
    lag = GaugeMetricFamily(
        "modelforge_projection_lag_events",
        "Events in the stream past the read model's checkpoint (published, not applied yet)",
        labels=["stream"],
    )
    since = GaugeMetricFamily(
        "modelforge_projection_seconds_since_applied",
        "Seconds since the projector last applied an event of the stream (absent: never)",
        labels=["stream"],
    )
    stopped = GaugeMetricFamily(
        "modelforge_projection_halted",
        "1 while the stream's projector is halted at an event it cannot apply",
        labels=["stream"],
    )
    now = time.time()
    for position in positions:
        stream = position["stream"]
        lag.add_metric([stream], position["lag"])
        stopped.add_metric([stream], 1.0 if stream in halted else 0.0)
        projected_at: datetime | None = position["projected_at"]
        if projected_at is not None:
            since.add_metric([stream], max(0.0, now - projected_at.timestamp()))
    return [lag, since, stopped]
