"""The in-memory Prometheus metrics: a histogram's buckets are cumulative, bounds inclusive."""

from __future__ import annotations

from gateway.http.metrics import Metrics


def bucket_lines(text: str) -> list[str]:
    return [line.split("{", 1)[1] for line in text.splitlines() if "_bucket{" in line]


def test_latency_buckets_count_every_observation_at_or_below_each_bound() -> None:
    metrics = Metrics()
    for total_ms in (0.4, 1.0, 1.2, 30.0, 20_000.0):
        metrics.observe("rag.embedding@1", "OK", 200, total_ms)
    lines = bucket_lines(metrics.render({}))
    assert lines[:4] == [
        'capability="rag.embedding@1",le="1.0"} 2',
        'capability="rag.embedding@1",le="2.5"} 3',
        'capability="rag.embedding@1",le="5.0"} 3',
        'capability="rag.embedding@1",le="10.0"} 3',
    ]
    assert lines[-2:] == [
        'capability="rag.embedding@1",le="10000.0"} 4',
        'capability="rag.embedding@1",le="+Inf"} 5',
    ]
    assert 'modelforge_request_latency_ms_count{capability="rag.embedding@1"} 5' in metrics.render({})
