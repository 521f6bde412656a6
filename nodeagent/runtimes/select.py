"""Pick the runtime for this node: TensorRT where it can run, ONNX Runtime on CPU otherwise."""

from __future__ import annotations

from enum import StrEnum

from nodeagent.runtimes.base import Runtime
from nodeagent.runtimes.gpu import nvml_gpu_count, tensorrt_installed
from nodeagent.runtimes.onnx import OnnxRuntimeCpu
from nodeagent.runtimes.tensorrt import TensorRTRuntime  # imports tensorrt only when it loads


class RuntimeKind(StrEnum):
    TENSORRT = "tensorrt"
    ONNXRUNTIME_CPU = "onnxruntime-cpu"


def choose_runtime_kind(*, tensorrt_is_installed: bool, gpu_count: int) -> RuntimeKind:
    """Pure choice, so the rule is testable without either condition being true here."""
    if tensorrt_is_installed and gpu_count > 0:
        return RuntimeKind.TENSORRT
    return RuntimeKind.ONNXRUNTIME_CPU


def create_runtime(kind: RuntimeKind, device_index: int = 0) -> Runtime:
    if kind is RuntimeKind.TENSORRT:
        return TensorRTRuntime(device_index)
    return OnnxRuntimeCpu()


def select_runtime(device_index: int = 0) -> Runtime:
    """The best runtime this machine can run."""
    kind = choose_runtime_kind(tensorrt_is_installed=tensorrt_installed(), gpu_count=nvml_gpu_count())
    return create_runtime(kind, device_index)
