"""A residency's memory is its worker process's own: its NVML per-process figure on a GPU (the
path this machine cannot run, here against a stand-in for NVML), and where the device cannot name
the process, what the worker's runtime saw of its domain."""

from __future__ import annotations

import os
import subprocess
from types import SimpleNamespace
from typing import Any

from nodeagent.agent.hardware import (
    Accelerator,
    MemoryReading,
    ProcessMemory,
    _gpu_process_reader,
    _gpu_reader,
    cpu_accelerator,
)
from nodeagent.agent.residency import _measured
from nodeagent.agent.telemetry import observe
from nodeagent.worker.protocol import Loaded
from streams.events.control import AcceleratorSpec
from streams.messages import WorkerMemory

AGENT, WORKER, OTHER = 100, 200, 300
MIB = 1 << 20


class _Nvml:
    """What the agent reads of NVML: the device's memory and each compute process's share."""

    def __init__(self, processes: dict[int, int] | None) -> None:
        self.processes = processes  # None: NVML will not say (a PID namespace)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:  # noqa: N802 (NVML's names)
        return index

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:  # noqa: N802
        return SimpleNamespace(total=80_000 * MIB, used=9_000 * MIB)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[Any]:  # noqa: N802
        if self.processes is None:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in self.processes.items()]


def _gpu(processes: dict[int, int] | None) -> Accelerator:
    spec = AcceleratorSpec(accelerator_id="n-gpu0", kind="gpu", name="stand-in", total_bytes=80_000 * MIB)
    nvml = _Nvml(processes)
    return Accelerator(spec, 0, _gpu_reader(nvml, 0), _gpu_process_reader(nvml, 0))


_LOADED = Loaded(
    runtime="tensorrt",
    warmup_ms=5.0,
    weights_bytes=50 * MIB,
    baseline_bytes=8_000 * MIB,  # the device-wide figure the runtime fell back to
    current_bytes=8_700 * MIB,
    peak_bytes=8_900 * MIB,
)


def test_a_gpu_worker_is_measured_by_its_own_nvml_figure_not_the_others() -> None:
    gpu = _gpu({AGENT: 0, WORKER: 700 * MIB, OTHER: 5_000 * MIB})
    measured = _measured(gpu, SimpleNamespace(pid=WORKER), _LOADED, 900.0)  # type: ignore[arg-type]
    assert (measured.baseline_bytes, measured.loaded_bytes) == (0, 700 * MIB)
    assert measured.measured_bytes == 700 * MIB


def test_gpu_telemetry_counts_the_agent_and_its_workers_as_its_own() -> None:
    gpu = _gpu({AGENT: 300 * MIB, WORKER: 700 * MIB, OTHER: 5_000 * MIB})
    assert gpu.read_memory([AGENT, WORKER]) == MemoryReading(80_000 * MIB, 9_000 * MIB, 1_000 * MIB)


def test_where_nvml_names_no_process_the_workers_runtime_view_stands_in() -> None:
    gpu = _gpu(None)
    assert gpu.read_process(WORKER) is None
    measured = _measured(gpu, SimpleNamespace(pid=WORKER), _LOADED, 900.0)  # type: ignore[arg-type]
    assert (measured.baseline_bytes, measured.loaded_bytes, measured.peak_bytes) == (
        8_000 * MIB,
        8_700 * MIB,
        8_900 * MIB,
    )
    assert measured.measured_bytes == 700 * MIB


def test_the_cpu_device_measures_a_process_by_its_rss_and_high_water_mark() -> None:
    cpu = cpu_accelerator("n", 4 << 30)
    held = cpu.read_process(os.getpid())
    assert held is not None
    assert 0 < held.current_bytes <= held.peak_bytes
    assert cpu.read_process(_gone_pid()) == ProcessMemory(0, 0)


def _gone_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_gpu_telemetry_names_each_residents_worker_by_its_nvml_figure() -> None:
    gpu = _gpu({AGENT: 300 * MIB, WORKER: 700 * MIB, OTHER: 5_000 * MIB})
    sample = observe("n", gpu, 1, ["dep"], [AGENT, WORKER], True, 1.0, [], [("dep", WORKER)])
    assert sample.workers == [WorkerMemory("dep", 700 * MIB)]


def test_telemetry_leaves_out_a_worker_the_device_cannot_measure() -> None:
    sample = observe("n", _gpu(None), 1, ["dep"], [AGENT, WORKER], True, 1.0, [], [("dep", WORKER)])
    assert sample.workers == []
