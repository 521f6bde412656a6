"""The runtime interface shared by ONNX Runtime (CPU) and TensorRT (GPU)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

Tensor = NDArray[Any]
# A dimension is a fixed size, a symbolic name ("batch", "sequence") or unknown.
Dim = int | str | None


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[Dim, ...]
    dtype: np.dtype[Any]

    @property
    def is_dynamic(self) -> bool:
        return any(not isinstance(dim, int) or dim < 0 for dim in self.shape)


@dataclass(frozen=True)
class MemoryStats:
    """Bytes measured for the runtime's memory domain (process RSS on CPU, device memory on GPU).

    `baseline` is taken just before load, `current` now, `peak` is the highest value seen
    since load (sampled at load and after each run).
    """

    baseline_bytes: int
    current_bytes: int
    peak_bytes: int

    @property
    def loaded_bytes(self) -> int:
        return max(0, self.current_bytes - self.baseline_bytes)

    @property
    def peak_over_baseline_bytes(self) -> int:
        return max(0, self.peak_bytes - self.baseline_bytes)


@dataclass(frozen=True)
class RuntimeOptions:
    intra_op_threads: int = 2  # ONNX Runtime; the agent passes its own (--cpu-threads)
    lanes: int = 1  # ONNX Runtime: batches it may run at once on one thread each (`Laned`)
    inter_op_threads: int = 1
    max_batch: int = 32  # TensorRT optimisation profile bounds
    max_seq: int = 256
    precision: str = "fp16"  # TensorRT builder precision
    engine_cache_dir: Path | None = None  # TensorRT serialized engines
    workspace_bytes: int = 1 << 30


class Runs(Protocol):
    """What runs a batch: a runtime, or one lane of it."""

    def run(self, inputs: Mapping[str, Tensor]) -> dict[str, Tensor]: ...


@runtime_checkable
class Laned(Protocol):
    """A runtime that can run up to `lanes` batches at once, each on one thread, through `lane`
    (its `run` uses every thread it was given for a lone batch)."""

    @property
    def lanes(self) -> int: ...

    @property
    def lane(self) -> Runs: ...


@runtime_checkable
class Runtime(Protocol):
    """Loads one model and runs batches on it. `run` may be called from a worker thread."""

    kind: str

    def load(self, model_path: Path, options: RuntimeOptions) -> None: ...

    def run(self, inputs: Mapping[str, Tensor]) -> dict[str, Tensor]: ...

    def unload(self) -> None: ...

    def memory_stats(self) -> MemoryStats: ...

    @property
    def input_specs(self) -> tuple[TensorSpec, ...]: ...

    @property
    def output_specs(self) -> tuple[TensorSpec, ...]: ...


class PeakTracker:
    """Baseline/current/peak bookkeeping over an arbitrary byte probe."""

    def __init__(self) -> None:
        self.baseline_bytes = 0
        self.peak_bytes = 0

    def start(self, now_bytes: int) -> None:
        self.baseline_bytes = now_bytes
        self.peak_bytes = now_bytes

    def sample(self, now_bytes: int) -> int:
        self.peak_bytes = max(self.peak_bytes, now_bytes)
        return now_bytes

    def stats(self, now_bytes: int) -> MemoryStats:
        self.sample(now_bytes)
        return MemoryStats(self.baseline_bytes, now_bytes, self.peak_bytes)
