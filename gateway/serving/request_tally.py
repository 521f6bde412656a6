"""The metrics every answered request updates: requests by capability, code and status, their wall
time, and a served request's stages.

They are kept in plain dicts and lists and handed to prometheus_client as metric families when
scraped (a custom collector, the library's own extension point). prometheus_client's own Counter
and Histogram take a lock for every value they change, three or four a histogram observation and
seven observations a request; the serving path runs on one event loop, and the scrape on the same
loop, so nothing here needs one.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator
from typing import TypeVar

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from streams.events.requests import LatencyBreakdown

# From a warm embedding (a few ms) to a long transcription or a cold load (a minute).
SECONDS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

# The stages of a served request's LatencyBreakdown an operator tunes against: waiting for
# capacity, deciding it, loading a model, the round trip to the agent, and the model itself.
STAGES: tuple[tuple[str, Callable[[LatencyBreakdown], float]], ...] = (
    ("queue", lambda latency: latency.queue_ms),
    ("scheduling", lambda latency: latency.scheduling_ms),
    ("load", lambda latency: latency.load_ms),
    ("dispatch", lambda latency: latency.dispatch_ms),
    ("engine", lambda latency: latency.worker_inference_ms),
)
_BOUNDS = [*(repr(bound) for bound in SECONDS_BUCKETS), "+Inf"]  # as prometheus_client writes them
K = TypeVar("K")


class _Histogram:
    """Observation counts per bucket (not cumulative; the last is +Inf) and their sum."""

    __slots__ = ("counts", "sum")

    def __init__(self) -> None:
        self.counts = [0] * (len(SECONDS_BUCKETS) + 1)
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(SECONDS_BUCKETS, seconds)] += 1  # a bucket holds v <= its bound
        self.sum += seconds

    def buckets(self) -> list[tuple[str, float]]:
        cumulative, out = 0, []
        for bound, count in zip(_BOUNDS, self.counts, strict=True):
            cumulative += count
            out.append((bound, float(cumulative)))
        return out


class RequestTally(Collector):
    def __init__(self) -> None:
        self._requests: dict[tuple[str, str, str], int] = {}
        self._durations: dict[str, _Histogram] = {}
        self._stages: dict[tuple[str, str], _Histogram] = {}

    def ended(
        self, capability: str, code: str, status: int, seconds: float, latency: LatencyBreakdown | None
    ) -> None:
        key = (capability, code, str(status))
        self._requests[key] = self._requests.get(key, 0) + 1
        _histogram(self._durations, capability).observe(seconds)
        if latency is not None:
            for stage, of in STAGES:
                _histogram(self._stages, (capability, stage)).observe(of(latency) / 1000)

    def collect(self) -> Iterator[CounterMetricFamily | HistogramMetricFamily]:
        requests = CounterMetricFamily(
            "modelforge_requests",
            "Capability requests this gateway answered, by capability, code (OK when served) and HTTP status",
            labels=["capability", "code", "status"],
        )
        for labels, count in self._requests.items():
            requests.add_metric(list(labels), count)
        yield requests
        duration = HistogramMetricFamily(
            "modelforge_request_duration_seconds",
            "Wall time of a capability request at this gateway, refusals included",
            labels=["capability"],
        )
        for capability, histogram in self._durations.items():
            duration.add_metric([capability], histogram.buckets(), histogram.sum)
        yield duration
        stages = HistogramMetricFamily(
            "modelforge_request_stage_seconds",
            "Time a served request spent in each stage: queue (for capacity and in the worker), "
            "scheduling, load (cold load or eviction), dispatch (round trip to the agent), engine (inference)",
            labels=["capability", "stage"],
        )
        for (capability, stage), histogram in self._stages.items():
            stages.add_metric([capability, stage], histogram.buckets(), histogram.sum)
        yield stages


def _histogram(histograms: dict[K, _Histogram], key: K) -> _Histogram:
    histogram = histograms.get(key)
    if histogram is None:
        histogram = histograms[key] = _Histogram()
    return histogram
