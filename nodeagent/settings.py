"""The environment variables that name a node agent's identity and model folder: read by the agent
and `models pull`, set by the embedded stack for its node, and by the gateway's `artifacts import`
for where a node's sets live; and the one that sizes its CPU runtime."""

from __future__ import annotations

NODE_ID_ENV = "MODELFORGE_NODE_ID"
ARTIFACT_ROOT_ENV = "MODELFORGE_ARTIFACT_ROOT"
# Threads ONNX Runtime runs one batch on (the CPU runtime only; TensorRT runs on its GPU).
CPU_THREADS_ENV = "MODELFORGE_CPU_THREADS"
DEFAULT_CPU_THREADS = 2
