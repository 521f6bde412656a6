"""A replica's Prometheus metrics, as the reference parser reads them."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from gateway.scheduler import PlacementDecision, ReasonCode, Verdict
from gateway.serving.metrics import ServingMetrics
from gateway.serving.request_tally import SECONDS_BUCKETS
from streams.events import serving as s
from streams.events.requests import LatencyBreakdown

EMBEDDING = "rag.embedding@1"


def samples(metrics: ServingMetrics | CollectorRegistry) -> list[Sample]:
    registry = metrics.registry if isinstance(metrics, ServingMetrics) else metrics
    text = generate_latest(registry).decode()
    return [sample for family in text_string_to_metric_families(text) for sample in family.samples]


def value(metrics: ServingMetrics, name: str, **labels: str) -> float:
    found = [x.value for x in samples(metrics) if x.name == name and x.labels == labels]
    assert len(found) == 1, (name, labels)
    return found[0]


def decision(verdict: Verdict, *reasons: ReasonCode) -> PlacementDecision:
    return PlacementDecision(
        verdict=verdict,
        accelerator_id=None,
        node_id=None,
        reason_codes=reasons,
        evictions=(),
        required_bytes=0,
        budget=None,
        headroom_after_bytes=None,
        reclaimed_bytes=0,
        cold_load=False,
        fingerprint="",
    )


def eviction(reason: str) -> s.EvictionPlanned:
    return s.EvictionPlanned(
        eviction_id="e",
        accelerator_id="a",
        victims=("d",),
        for_deployment_id="",
        required_bytes=0,
        decision_fingerprint="",
        reason=reason,
    )


def test_requests_are_counted_by_capability_code_and_status() -> None:
    metrics = ServingMetrics()
    metrics.request_ended(EMBEDDING, "OK", 200, 0.01)
    metrics.request_ended(EMBEDDING, "OK", 200, 0.02)
    metrics.request_ended(EMBEDDING, "INVALID_INPUT", 400, 0.001)
    assert value(metrics, "modelforge_requests_total", capability=EMBEDDING, code="OK", status="200") == 2
    assert (
        value(metrics, "modelforge_requests_total", capability=EMBEDDING, code="INVALID_INPUT", status="400")
        == 1
    )


def test_a_served_requests_stages_are_observed_in_seconds() -> None:
    metrics = ServingMetrics()
    latency = LatencyBreakdown(queue_ms=30.0, scheduling_ms=1.0, dispatch_ms=5.0, worker_inference_ms=4.0)
    metrics.request_ended(EMBEDDING, "OK", 200, 0.04, latency)
    stage_sum = "modelforge_request_stage_seconds_sum"
    assert value(metrics, stage_sum, capability=EMBEDDING, stage="queue") == 0.03
    assert value(metrics, stage_sum, capability=EMBEDDING, stage="engine") == 0.004
    assert value(metrics, "modelforge_request_duration_seconds_sum", capability=EMBEDDING) == 0.04


@given(st.lists(st.sampled_from(SECONDS_BUCKETS) | st.floats(0, 100), max_size=40))
def test_durations_fall_in_the_buckets_prometheus_clients_own_histogram_puts_them_in(
    durations: list[float],
) -> None:
    metrics, registry = ServingMetrics(), CollectorRegistry()
    name = "modelforge_request_duration_seconds"
    reference = Histogram(name, "the same", ["capability"], buckets=SECONDS_BUCKETS, registry=registry)
    for seconds in durations:
        metrics.request_ended(EMBEDDING, "OK", 200, seconds)
        reference.labels(EMBEDDING).observe(seconds)

    def series(source: ServingMetrics | CollectorRegistry) -> dict[tuple[str, str], float]:
        found = [x for x in samples(source) if x.name.startswith(name) and not x.name.endswith("_created")]
        return {(x.name, x.labels.get("le", "")): x.value for x in found}

    assert series(metrics) == series(registry)


def test_placement_verdicts_are_counted_and_a_rejection_by_its_first_reason() -> None:
    metrics = ServingMetrics()
    metrics.decided(decision(Verdict.ADMIT, ReasonCode.RESIDENT_WARM))
    metrics.decided(
        decision(
            Verdict.REJECT_INSUFFICIENT_CAPACITY,
            ReasonCode.INSUFFICIENT_SCHEDULABLE_VRAM,
            ReasonCode.CO_RESIDENCY_UNSAFE,
        )
    )
    assert value(metrics, "modelforge_placement_decisions_total", verdict="ADMIT") == 1
    assert value(metrics, "modelforge_placement_decisions_total", verdict="REJECT_INSUFFICIENT_CAPACITY") == 1
    rejections = [x for x in samples(metrics) if x.name == "modelforge_placement_rejections_total"]
    assert [(x.labels, x.value) for x in rejections] == [({"reason": "INSUFFICIENT_SCHEDULABLE_VRAM"}, 1)]


def test_appended_evictions_are_counted_by_reason_and_leases_granted() -> None:
    metrics = ServingMetrics()
    lease = s.LeaseGranted(
        lease_id="l",
        accelerator_id="a",
        deployment_id="d",
        request_id="r",
        client_id="c",
        reserved_bytes=1,
        expires_at=datetime.now(UTC),
        decision_fingerprint="",
    )
    metrics.appended([eviction("keep_warm_ttl"), lease, eviction("eviction"), eviction("keep_warm_ttl")])
    assert value(metrics, "modelforge_evictions_total", reason="keep_warm_ttl") == 2
    assert value(metrics, "modelforge_evictions_total", reason="eviction") == 1
    assert value(metrics, "modelforge_leases_granted_total") == 1


def test_each_replica_counts_in_a_registry_of_its_own() -> None:
    one, other = ServingMetrics(), ServingMetrics()
    one.request_ended(EMBEDDING, "OK", 200, 0.01)
    assert value(one, "modelforge_requests_total", capability=EMBEDDING, code="OK", status="200") == 1
    assert not [x for x in samples(other) if x.name == "modelforge_requests_total"]


def test_process_metrics_are_in_the_replicas_registry() -> None:
    names = {x.name for x in samples(ServingMetrics())}
    assert {"process_resident_memory_bytes", "process_cpu_seconds_total", "python_info"} <= names
