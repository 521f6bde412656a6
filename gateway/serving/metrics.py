"""This replica's Prometheus metrics: counters and histograms updated where a request ends, a
placement is decided or an append lands; the gauges of the live view are read at scrape time
(`gateway.serving.gauges`).

Each replica has a registry of its own, not prometheus_client's global one: several replicas in
one process (the tests') would otherwise collide. Latencies are in seconds, as Prometheus names
them. Label children are cached: `labels()` takes a lock and builds a tuple on every call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from prometheus_client import CollectorRegistry, Counter, Histogram, PlatformCollector, ProcessCollector
from prometheus_client.registry import Collector

from gateway.scheduler import PlacementDecision
from streams.events import serving as s
from streams.events.base import Event
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

Metric = TypeVar("Metric", Counter, Histogram)


class _Labelled(Generic[Metric]):
    """A labelled family with its children cached by label values."""

    def __init__(self, metric: Metric) -> None:
        self._metric: Metric = metric
        self._children: dict[tuple[str, ...], Metric] = {}

    def __call__(self, *labels: str) -> Metric:
        child = self._children.get(labels)
        if child is None:
            child = self._children[labels] = self._metric.labels(*labels)
        return child


class ServingMetrics:
    def __init__(self, live: Collector | None = None) -> None:
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        registry = self.registry
        self._requests = _Labelled(
            Counter(
                "modelforge_requests",
                "Capability requests this gateway answered, by capability, code (OK when served) and HTTP status",
                ["capability", "code", "status"],
                registry=registry,
            )
        )
        self._duration = _Labelled(
            Histogram(
                "modelforge_request_duration_seconds",
                "Wall time of a capability request at this gateway, refusals included",
                ["capability"],
                buckets=SECONDS_BUCKETS,
                registry=registry,
            )
        )
        self._stages = _Labelled(
            Histogram(
                "modelforge_request_stage_seconds",
                "Time a served request spent in each stage: queue (for capacity and in the worker), "
                "scheduling, load (cold load or eviction), dispatch (round trip to the agent), engine (inference)",
                ["capability", "stage"],
                buckets=SECONDS_BUCKETS,
                registry=registry,
            )
        )
        self._verdicts = _Labelled(
            Counter(
                "modelforge_placement_decisions",
                "Placement decisions this gateway took for requests, by verdict (a queued request decides again)",
                ["verdict"],
                registry=registry,
            )
        )
        self._rejections = _Labelled(
            Counter(
                "modelforge_placement_rejections",
                "Placements this gateway refused, by the decision's client-facing reason code",
                ["reason"],
                registry=registry,
            )
        )
        self._evictions = _Labelled(
            Counter(
                "modelforge_evictions",
                "Evictions this gateway put on the books, by reason (eviction: room for a request or an "
                "always-warm load; operator, drain, keep_warm_ttl, artifact_set_unservable, over_capacity, "
                "replica_idle)",
                ["reason"],
                registry=registry,
            )
        )
        self._leases = Counter(
            "modelforge_leases_granted", "Leases this gateway put on the books", registry=registry
        )
        self._under_standby = _Labelled(
            Counter(
                "modelforge_standby_requests",
                "Requests this gateway ran under a slot of its standby lease, with no lease of their own "
                "(the event log had no leader)",
                ["deployment"],
                registry=registry,
            )
        )
        if live is not None:
            registry.register(live)

    def request_ended(
        self, capability: str, code: str, status: int, seconds: float, latency: LatencyBreakdown | None = None
    ) -> None:
        """One answered request; `latency` (a served request's breakdown) adds its stages."""
        self._requests(capability, code, str(status)).inc()
        self._duration(capability).observe(seconds)
        if latency is not None:
            for stage, of in STAGES:
                self._stages(capability, stage).observe(of(latency) / 1000)

    def decided(self, decision: PlacementDecision) -> None:
        verdict = decision.verdict
        self._verdicts(verdict.value).inc()
        if verdict.rejects and decision.reason_codes:
            self._rejections(decision.reason_codes[0].value).inc()

    def ran_under_standby(self, deployment_id: str) -> None:
        self._under_standby(deployment_id).inc()

    def appended(self, events: list[Event]) -> None:
        """Events this gateway appended to an accelerator (acknowledged)."""
        for event in events:
            if isinstance(event, s.LeaseGranted):
                self._leases.inc()
            elif isinstance(event, s.EvictionPlanned):
                self._evictions(event.reason).inc()
