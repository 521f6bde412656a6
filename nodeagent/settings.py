"""The environment variables that name a node agent's identity and model folder: read by the agent
and `models pull`, set by the embedded stack for its node, and by the gateway's `artifacts import`
for where a node's sets live; and the one that sizes its CPU runtime."""

from __future__ import annotations

import os

from artifacts.paths import ARTIFACT_ROOT_ENV as ARTIFACT_ROOT_ENV

NODE_ID_ENV = "MODELFORGE_NODE_ID"
# Bytes of artifact sets fetched from the artifact bucket a node keeps under <root>/.cache (LRU).
ARTIFACT_CACHE_BYTES_ENV = "MODELFORGE_ARTIFACT_CACHE_BYTES"
DEFAULT_ARTIFACT_CACHE_BYTES = 20 << 30
# Threads ONNX Runtime runs a lone batch on (the CPU runtime only; TensorRT runs on its GPU), and
# how many batches of embeddings or reranking it runs at once, one thread each, when requests queue
# up for more than one batch (each thread costs less CPU per row alone than as one of a batch's; a
# second one-thread ONNX Runtime session holds the lanes: docs/performance.md, "Lanes"). Every
# core this process may use by default: on a node of its own the agent has nothing to leave them
# to (MiniLM alone: 458 against 272 sequences/s in batches of 32 with two threads rather than one,
# on 2 cores), and beside a gateway and NATS on 2 cores a lone request through the stack ran 0-2.2 ms
# sooner with two (three alternating pairs). One thread served ~5 % more requests/s at 32
# connections on that shared box: set it there for saturation (docs/performance.md).
CPU_THREADS_ENV = "MODELFORGE_CPU_THREADS"
# Where the agent answers Prometheus scrapes (nodeagent.agent.metrics): unset or 0, nowhere (the
# agent then only connects out); its host 127.0.0.1 unless set (0.0.0.0: every interface).
METRICS_PORT_ENV = "MODELFORGE_AGENT_METRICS_PORT"
METRICS_HOST_ENV = "MODELFORGE_AGENT_METRICS_HOST"
# 1 (the default): a worker process is started ahead of the next load (nodeagent/agent/spare.py);
# 0: each load starts its own.
SPARE_WORKER_ENV = "MODELFORGE_SPARE_WORKER"


def usable_cores() -> int:
    """The cores this process may run on (its affinity, where the OS tells it)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


DEFAULT_CPU_THREADS = usable_cores()
