"""Lazy access to cuda-python and NVML. Importing this module imports neither."""

from __future__ import annotations

import importlib
import importlib.util
import os
from types import ModuleType
from typing import Any

from streams import codes
from streams.codes import ServingError


def module_available(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def tensorrt_installed() -> bool:
    # find_spec, not import: importing tensorrt initialises CUDA, which a CPU node must not do.
    return module_available("tensorrt") and module_available("cuda")


def import_cudart() -> ModuleType:
    """cuda-python's runtime bindings (new layout first, the pre-12.6 `cuda.cudart` second)."""
    for name in ("cuda.bindings.runtime", "cuda.cudart"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ServingError(
        codes.RUNTIME_DEPENDENCY_MISSING.code,
        "cuda-python is not installed (pip install 'modelforge-serving[gpu]')",
    )


def cuda_check(result: Any) -> Any:
    """Unwrap a cuda-python `(err, *values)` tuple, raising on any error."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise ServingError(codes.INFERENCE_FAILED.code, f"CUDA call failed: {err!r}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def nvml_gpu_count() -> int:
    """Number of NVIDIA GPUs NVML sees; 0 when there is no driver or no nvidia-ml-py."""
    try:
        pynvml: Any = importlib.import_module("pynvml")
        pynvml.nvmlInit()
    except Exception:  # no library, no driver: both simply mean "no GPU"
        return 0
    try:
        return int(pynvml.nvmlDeviceGetCount())
    except Exception:
        return 0
    finally:
        pynvml.nvmlShutdown()


def ctranslate2_cuda_count() -> int:
    """GPUs CTranslate2 can run on (0 where it is not installed or built without CUDA)."""
    try:
        module: Any = importlib.import_module("ctranslate2")
    except ImportError:
        return 0
    return int(module.get_cuda_device_count())


def compute_capability(cudart: ModuleType, device_index: int) -> tuple[int, int]:
    attrs = cudart.cudaDeviceAttr
    major = cuda_check(cudart.cudaDeviceGetAttribute(attrs.cudaDevAttrComputeCapabilityMajor, device_index))
    minor = cuda_check(cudart.cudaDeviceGetAttribute(attrs.cudaDevAttrComputeCapabilityMinor, device_index))
    return int(major), int(minor)


def gpu_used_bytes(cudart: ModuleType, device_index: int) -> int:
    """This process's device memory (NVML), else the whole device's used memory (cudaMemGetInfo).

    NVML's per-process figure is what a shared GPU needs; it is unavailable inside some
    containers (PID namespaces), where the device-wide figure is the honest fallback.
    """
    try:
        pynvml: Any = importlib.import_module("pynvml")
        pynvml.nvmlInit()
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(device_index)
            for process in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                if process.pid == os.getpid() and process.usedGpuMemory is not None:
                    return int(process.usedGpuMemory)
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        pass  # fall through to the device-wide figure
    free, total = cuda_check(cudart.cudaMemGetInfo())
    return int(total) - int(free)
