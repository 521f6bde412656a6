"""The environment variables that name a node agent's identity and model folder: read by the agent
and `models pull`, set by the embedded stack for its node, and by the gateway's `artifacts import`
for where a node's sets live; and the one that sizes its CPU runtime."""

from __future__ import annotations

import os

NODE_ID_ENV = "MODELFORGE_NODE_ID"
ARTIFACT_ROOT_ENV = "MODELFORGE_ARTIFACT_ROOT"
# Threads ONNX Runtime runs one batch on (the CPU runtime only; TensorRT runs on its GPU). Half
# the cores by default: the rest stay with the agent's event loop, NATS and a gateway on the same
# box. On 2 cores one thread served ~5 % more requests/s than two at 32 connections, with ~16 % less
# agent CPU per request (bench.gateway, docs/performance.md).
CPU_THREADS_ENV = "MODELFORGE_CPU_THREADS"
DEFAULT_CPU_THREADS = max(1, (os.cpu_count() or 2) // 2)
