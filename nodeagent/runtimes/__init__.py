"""Runtimes behind one interface: ONNX Runtime (CPU) and TensorRT (GPU, imported lazily)."""

from nodeagent.runtimes.base import MemoryStats, Runtime, RuntimeOptions, TensorSpec
from nodeagent.runtimes.select import RuntimeKind, choose_runtime_kind, create_runtime, select_runtime

__all__ = [
    "MemoryStats",
    "Runtime",
    "RuntimeKind",
    "RuntimeOptions",
    "TensorSpec",
    "choose_runtime_kind",
    "create_runtime",
    "select_runtime",
]
