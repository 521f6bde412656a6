"""What this node has to offer: NVML GPUs where there are any, else one CPU device with a RAM budget,
and how each measures its memory: the node's, and a process's own (a worker's, for its residency).

NVML (`pynvml` from nvidia-ml-py) is imported lazily, so a CPU node never touches a GPU library.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import platform
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from nodeagent.runtimes.process_memory import peak_rss_of, rss_of
from streams import subjects
from streams.events.control import AcceleratorSpec

DEFAULT_CPU_MEMORY_BUDGET = 4 << 30


@dataclass(frozen=True)
class MemoryReading:
    total_bytes: int
    used_bytes: int
    process_bytes: int  # what the agent and its workers hold


@dataclass(frozen=True)
class ProcessMemory:
    """What one process holds in a device's memory: now, and at the most so far (where the device
    keeps a high-water mark; else the same)."""

    current_bytes: int
    peak_bytes: int


@dataclass(frozen=True)
class Accelerator:
    spec: AcceleratorSpec
    device_index: int  # NVML index for a GPU; -1 for the CPU device
    read_memory: Callable[[Sequence[int]], MemoryReading]  # given the agent's and its workers' pids
    # A process's own memory on this device; None where the device cannot tell (NVML without
    # per-process figures, inside some PID namespaces).
    read_process: Callable[[int], ProcessMemory | None]

    @property
    def id(self) -> str:
        return self.spec.accelerator_id

    @property
    def is_gpu(self) -> bool:
        return self.spec.kind == "gpu"


@dataclass(frozen=True)
class Hardware:
    node_id: str
    hostname: str
    accelerators: tuple[Accelerator, ...]
    fingerprint: str

    def accelerator(self, accelerator_id: str) -> Accelerator | None:
        return next((a for a in self.accelerators if a.id == accelerator_id), None)

    @property
    def specs(self) -> tuple[AcceleratorSpec, ...]:
        return tuple(a.spec for a in self.accelerators)


def _pynvml() -> Any | None:
    try:
        module: Any = importlib.import_module("pynvml")
        module.nvmlInit()
    except Exception:  # no nvidia-ml-py, no driver: both mean "no GPU here"
        return None
    return module


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _gpu_processes(nvml: Any, index: int) -> dict[int, int]:
    """Device memory per process on GPU `index` (empty where NVML will not say)."""
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        return {
            int(p.pid): int(p.usedGpuMemory)
            for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)
            if p.usedGpuMemory is not None
        }
    except Exception:  # unavailable in some PID namespaces; device-wide use still holds
        return {}


def _gpu_reader(nvml: Any, index: int) -> Callable[[Sequence[int]], MemoryReading]:
    def read(pids: Sequence[int]) -> MemoryReading:
        info = nvml.nvmlDeviceGetMemoryInfo(nvml.nvmlDeviceGetHandleByIndex(index))
        held = _gpu_processes(nvml, index)
        return MemoryReading(int(info.total), int(info.used), sum(held.get(pid, 0) for pid in pids))

    return read


def _gpu_process_reader(nvml: Any, index: int) -> Callable[[int], ProcessMemory | None]:
    def read(pid: int) -> ProcessMemory | None:
        held = _gpu_processes(nvml, index).get(pid)
        return None if held is None else ProcessMemory(held, held)

    return read


def nvml_accelerators(node_id: str) -> tuple[Accelerator, ...]:
    nvml = _pynvml()
    if nvml is None:
        return ()
    found = []
    for index in range(int(nvml.nvmlDeviceGetCount())):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
        spec = AcceleratorSpec(
            accelerator_id=subjects.accelerator_id(node_id, "gpu", index),
            kind="gpu",
            name=_text(nvml.nvmlDeviceGetName(handle)),
            total_bytes=int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
            compute_capability=f"{major}.{minor}",
            uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
        )
        found.append(Accelerator(spec, index, _gpu_reader(nvml, index), _gpu_process_reader(nvml, index)))
    return tuple(found)


def _cpu_process(pid: int) -> ProcessMemory:
    return ProcessMemory(rss_of(pid), peak_rss_of(pid))


def cpu_accelerator(node_id: str, budget_bytes: int) -> Accelerator:
    def read(pids: Sequence[int]) -> MemoryReading:
        rss = sum(rss_of(pid) for pid in pids)
        return MemoryReading(budget_bytes, rss, rss)

    spec = AcceleratorSpec(
        accelerator_id=subjects.accelerator_id(node_id, "cpu", 0),
        kind="cpu",
        name=_cpu_model(),
        total_bytes=budget_bytes,
    )
    return Accelerator(spec, -1, read, _cpu_process)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def fingerprint(specs: tuple[AcceleratorSpec, ...]) -> str:
    """A stable hash of what the node is: CPU, core count, RAM and every accelerator."""
    try:
        ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        ram = 0
    facts = {
        "machine": platform.machine(),
        "cpu": _cpu_model(),
        "cores": os.cpu_count() or 0,
        "ram_bytes": ram,
        "accelerators": [[s.kind, s.name, s.total_bytes, s.compute_capability, s.uuid] for s in specs],
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()


def detect(node_id: str, cpu_memory_budget: int = DEFAULT_CPU_MEMORY_BUDGET) -> Hardware:
    accelerators = nvml_accelerators(node_id) or (cpu_accelerator(node_id, cpu_memory_budget),)
    specs = tuple(a.spec for a in accelerators)
    return Hardware(node_id, socket.gethostname(), accelerators, fingerprint(specs))
