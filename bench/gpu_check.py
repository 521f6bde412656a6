"""GPU check for the agent's hardware layer (run only on a machine with an NVIDIA GPU).

1. NVML: the agent detects each GPU as `<node>-gpu<i>` and its telemetry reading is sane.
2. Per-process memory: allocating device memory with cuda-python raises this process's NVML
   figure (or, where NVML cannot see per-process use, the device-wide figure) by about the
   allocation, and freeing it brings it back down — what load/unload measurements rely on.
Skips cleanly (exit 0, "SKIP: ...") without nvidia-ml-py, a driver, a GPU or cuda-python.
    .venv/bin/python -m bench.gpu_check [--mib 512]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from nodeagent.agent.hardware import Accelerator, MemoryReading, nvml_accelerators
from nodeagent.runtimes.gpu import cuda_check, import_cudart, module_available
from streams.codes import ServingError


def skip(why: str) -> int:
    print(f"SKIP: {why}")
    return 0


def settled(gpu: Accelerator, attempts: int = 20) -> MemoryReading:
    # NVML's per-process accounting trails cudaMalloc slightly; read until two readings agree.
    previous = gpu.read_memory([os.getpid()])
    for _ in range(attempts):
        time.sleep(0.05)  # a measurement script, not product code
        current = gpu.read_memory([os.getpid()])
        if current == previous:
            return current
        previous = current
    return previous


def main(mib: int) -> int:
    gpus = nvml_accelerators("gpucheck")
    if not gpus:
        return skip("no NVIDIA GPU visible through NVML (or nvidia-ml-py/driver missing)")
    failures = 0
    for gpu in gpus:
        reading = gpu.read_memory([os.getpid()])
        print(f"{gpu.id}: {gpu.spec.name} cc {gpu.spec.compute_capability} uuid {gpu.spec.uuid}")
        print(
            f"  total {reading.total_bytes >> 20} MiB, used {reading.used_bytes >> 20} MiB, "
            f"this process {reading.process_bytes >> 20} MiB"
        )
        if not 0 < reading.used_bytes <= reading.total_bytes:
            print("  FAIL: used/total out of range")
            failures += 1
    if not module_available("cuda"):
        print(skip("cuda-python not installed: per-process allocation check skipped"))
        return 1 if failures else 0
    try:
        cudart = import_cudart()
    except ServingError as error:
        return skip(error.message)
    gpu = gpus[0]
    cuda_check(cudart.cudaSetDevice(gpu.device_index))
    cuda_check(cudart.cudaFree(0))  # create the context first: its own memory is not the allocation
    before = settled(gpu)
    size = mib << 20
    pointer = cuda_check(cudart.cudaMalloc(size))
    cuda_check(cudart.cudaMemset(pointer, 1, size))  # touch it so the driver commits it
    cuda_check(cudart.cudaDeviceSynchronize())
    during = settled(gpu)
    cuda_check(cudart.cudaFree(pointer))
    cuda_check(cudart.cudaDeviceSynchronize())
    after = settled(gpu)
    per_process = during.process_bytes > 0
    grew = (
        (during.process_bytes - before.process_bytes)
        if per_process
        else (during.used_bytes - before.used_bytes)
    )
    shrank = (
        (during.process_bytes - after.process_bytes)
        if per_process
        else (during.used_bytes - after.used_bytes)
    )
    source = "NVML per-process" if per_process else "device-wide (NVML per-process unavailable)"
    print(f"allocation of {mib} MiB on {gpu.id}, measured {source}:")
    print(f"  grew {grew / 2**20:.0f} MiB, reclaimed {shrank / 2**20:.0f} MiB after free")
    tolerance = 64 << 20  # allocation granularity and driver bookkeeping
    if abs(grew - size) > tolerance or abs(shrank - size) > tolerance:
        print("  FAIL: measured change does not match the allocation")
        failures += 1
    else:
        print("  OK")
    return 1 if failures else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mib", type=int, default=512)
    sys.exit(main(parser.parse_args().mib))
