"""Prometheus text metrics kept in memory (no client library needed for a handful of series)."""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from dataclasses import dataclass, field

_BUCKETS_MS = (1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 10000.0)


@dataclass
class Metrics:
    requests: Counter[tuple[str, str, int]] = field(default_factory=Counter)  # capability, code, status
    # capability, index of the smallest bound ≥ the latency (len(_BUCKETS_MS): above them all);
    # the cumulative `le` counts are summed when rendered, not on every request
    latency_buckets: Counter[tuple[str, int]] = field(default_factory=Counter)
    latency_sum_ms: dict[str, float] = field(default_factory=dict)
    latency_count: Counter[str] = field(default_factory=Counter)

    def observe(self, capability: str, code: str, status: int, total_ms: float) -> None:
        self.requests[(capability, code, status)] += 1
        self.latency_sum_ms[capability] = self.latency_sum_ms.get(capability, 0.0) + total_ms
        self.latency_count[capability] += 1
        self.latency_buckets[(capability, bisect_left(_BUCKETS_MS, total_ms))] += 1

    def render(self, gauges: dict[str, float]) -> str:
        lines = ["# TYPE modelforge_requests_total counter"]
        for (capability, code, status), n in sorted(self.requests.items()):
            lines.append(
                f'modelforge_requests_total{{capability="{capability}",code="{code}",status="{status}"}} {n}'
            )
        lines.append("# TYPE modelforge_request_latency_ms histogram")
        for capability in sorted(self.latency_count):
            n = 0
            for index, bound in enumerate(_BUCKETS_MS):
                n += self.latency_buckets[(capability, index)]
                lines.append(
                    f'modelforge_request_latency_ms_bucket{{capability="{capability}",le="{bound}"}} {n}'
                )
            count = self.latency_count[capability]
            lines.append(
                f'modelforge_request_latency_ms_bucket{{capability="{capability}",le="+Inf"}} {count}'
            )
            lines.append(
                f'modelforge_request_latency_ms_sum{{capability="{capability}"}} {self.latency_sum_ms[capability]:.3f}'
            )
            lines.append(f'modelforge_request_latency_ms_count{{capability="{capability}"}} {count}')
        for name, value in sorted(gauges.items()):
            lines.append(f"# TYPE {name} gauge")
            lines.append(f"{name} {value}")
        return "\n".join(lines) + "\n"
