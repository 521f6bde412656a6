"""This replica's Prometheus metrics: counters and histograms updated where a request ends
(`gateway.serving.request_tally`), a placement is decided or an append lands; the gauges of the
live view are read at scrape time (`gateway.serving.gauges`).

Each replica has a registry of its own, not prometheus_client's global one: several replicas in
one process (the tests') would otherwise collide. Latencies are in seconds, as Prometheus names
them. Label children are cached: `labels()` takes a lock and builds a tuple on every call.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, PlatformCollector, ProcessCollector
from prometheus_client.registry import Collector

from gateway.scheduler import PlacementDecision
from gateway.serving.request_tally import RequestTally
from streams.events import serving as s
from streams.events.base import Event
from streams.events.requests import LatencyBreakdown


class _Labelled:
    """A labelled counter with its children cached by label values."""

    def __init__(self, metric: Counter) -> None:
        self._metric = metric
        self._children: dict[tuple[str, ...], Counter] = {}

    def __call__(self, *labels: str) -> Counter:
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
        self._tally = RequestTally()
        registry.register(self._tally)
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
        self._tally.ended(capability, code, status, seconds, latency)

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
