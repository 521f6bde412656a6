"""The node agent's Prometheus metrics, served on an HTTP port of its own when one is configured
(`--metrics-port`, `MODELFORGE_AGENT_METRICS_PORT`; off by default: the agent otherwise only
connects out). Invokes by capability and outcome code and their latency at the agent (from the
message's arrival to its reply), control jobs by operation and outcome and their duration, and per
residency its worker's memory, read when scraped. `prometheus-client`'s own server answers on a
thread: counters are thread-safe and the residencies are copied before they are read.

Whether or not the port is open, the agent's own families go out as a snapshot with each telemetry
round (`snapshot`), and the gateway's `/metrics` shows them for every live node, labelled by node
(gateway/serving/fleet_metrics.py). The snapshot carries the agent's process metrics too, renamed
under the agent's prefix (`process_cpu_seconds_total` as `modelforge_agent_process_cpu_seconds_total`,
...) so that they cannot clash with the gateway's own `process_*`; and per residency its worker
process's CPU time and resident memory (`modelforge_agent_worker_cpu_seconds_total`,
`modelforge_agent_worker_resident_memory_bytes`, read from /proc as ProcessCollector does).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
    start_http_server,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from nodeagent.agent.hardware import Hardware

log = logging.getLogger("modelforge.agent.metrics")
OWN_PREFIX = "modelforge_agent_"  # the families a snapshot carries
# From a warm embedding batch (ms) to a long transcription; jobs up to a large cold load.
INVOKE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
JOB_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)


@dataclass(frozen=True)
class ResidentWorker:
    deployment_id: str
    accelerator_id: str
    capability: str
    pid: int
    in_flight: int


class _Residencies(Collector):
    """Per residency: its worker's memory on its accelerator (now) and its invokes in flight."""

    def __init__(self, hardware: Hardware, residents: Callable[[], list[ResidentWorker]]) -> None:
        self._hardware, self._residents = hardware, residents

    def collect(self) -> Iterator[Metric]:
        labels = ["deployment", "accelerator", "capability"]
        memory = GaugeMetricFamily(
            "modelforge_agent_worker_memory_bytes",
            "Memory the deployment's worker process holds on its accelerator now",
            labels=labels,
        )
        in_flight = GaugeMetricFamily(
            "modelforge_agent_invokes_in_flight", "Invokes the deployment's worker is running", labels=labels
        )
        cpu = CounterMetricFamily(
            "modelforge_agent_worker_cpu_seconds",
            "CPU seconds the deployment's worker process has used",
            labels=labels,
        )
        resident_memory = GaugeMetricFamily(
            "modelforge_agent_worker_resident_memory_bytes",
            "Resident memory (host RAM) of the deployment's worker process",
            labels=labels,
        )
        for resident in self._residents():
            values = [resident.deployment_id, resident.accelerator_id, resident.capability]
            in_flight.add_metric(values, resident.in_flight)
            process = _process_of(resident.pid)  # (a worker gone, or no /proc: left out)
            if "process_cpu_seconds" in process:
                cpu.add_metric(values, process["process_cpu_seconds"])
            if "process_resident_memory_bytes" in process:
                resident_memory.add_metric(values, process["process_resident_memory_bytes"])
            accelerator = self._hardware.accelerator(resident.accelerator_id)
            held = accelerator.read_process(resident.pid) if accelerator is not None else None
            if held is not None:  # (a device that cannot tell one process's memory: left out)
                memory.add_metric(values, held.current_bytes)
        yield memory
        yield in_flight
        yield cpu
        yield resident_memory


def _process_of(pid: int) -> dict[str, float]:
    """ProcessCollector's readings of another process, by family name ({} when it cannot read them)."""
    return {
        family.name: family.samples[0].value
        for family in ProcessCollector(pid=lambda: pid, registry=None).collect()
    }


def _renamed(family: Metric) -> Metric:
    """A process or platform family under the agent's prefix (`process_open_fds` as
    `modelforge_agent_process_open_fds`), its samples renamed alike."""
    out = Metric(OWN_PREFIX + family.name, family.documentation, family.type, family.unit)
    for sample in family.samples:
        out.add_sample(
            OWN_PREFIX + sample.name, sample.labels, sample.value, sample.timestamp, sample.exemplar
        )
    return out


class _Own(Collector):
    """What a snapshot carries: the agent's own families, and its process and platform ones renamed."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        for family in self._registry.collect():
            yield family if family.name.startswith(OWN_PREFIX) else _renamed(family)


class AgentMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        self._invokes = Counter(
            "modelforge_agent_invokes",
            "Invokes this agent answered, by capability and outcome code (OK when served)",
            ["capability", "code"],
            registry=self.registry,
        )
        self._invoke_seconds = Histogram(
            "modelforge_agent_invoke_duration_seconds",
            "Seconds from an invoke's arrival at the agent to its reply (the worker's queue and run included)",
            ["capability"],
            buckets=INVOKE_BUCKETS,
            registry=self.registry,
        )
        self._jobs = Counter(
            "modelforge_agent_jobs",
            "Control jobs taken from MF_WORK, by operation and outcome",
            ["op", "outcome"],
            registry=self.registry,
        )
        self._job_seconds = Histogram(
            "modelforge_agent_job_duration_seconds",
            "Seconds a control job ran, by operation",
            ["op"],
            buckets=JOB_BUCKETS,
            registry=self.registry,
        )

    def watch(self, hardware: Hardware, residents: Callable[[], list[ResidentWorker]]) -> None:
        self.registry.register(_Residencies(hardware, residents))

    def invoked(self, capability: str, code: str, seconds: float) -> None:
        self._invokes.labels(capability, code).inc()
        self._invoke_seconds.labels(capability).observe(seconds)

    def job_ended(self, op: str, outcome: str, seconds: float) -> None:
        self._jobs.labels(op, outcome).inc()
        self._job_seconds.labels(op).observe(seconds)

    def snapshot(self) -> bytes:
        """The agent's own families in the Prometheus text format (what the gateway re-exports)."""
        return generate_latest(_Own(self.registry))

    def serve(self, host: str, port: int) -> None:
        """Answer scrapes on `host:port` (a daemon thread, for the life of the process)."""
        start_http_server(port, host, registry=self.registry)
        log.info("agent metrics on http://%s:%d/metrics", host, port)
