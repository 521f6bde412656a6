"""Two models held as one residency: loaded together, unloaded together, measured as one."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from nodeagent.runtimes.base import MemoryStats, RuntimeOptions, Tensor, TensorSpec
from nodeagent.runtimes.paired import PairedRuntime


class RecordingRuntime:
    """A runtime that records what it was asked to do and reports the memory it is given."""

    kind = "recording"

    def __init__(self, memory: MemoryStats, fails_to_load: bool = False) -> None:
        self.memory, self.fails_to_load = memory, fails_to_load
        self.loaded: Path | None = None

    def load(self, model_path: Path, options: RuntimeOptions) -> None:
        if self.fails_to_load:
            raise RuntimeError("no such model")
        self.loaded = model_path

    def run(self, inputs: Mapping[str, Tensor]) -> dict[str, Tensor]:
        return dict(inputs)

    def unload(self) -> None:
        self.loaded = None

    def memory_stats(self) -> MemoryStats:
        return self.memory

    @property
    def input_specs(self) -> tuple[TensorSpec, ...]:
        return ()

    @property
    def output_specs(self) -> tuple[TensorSpec, ...]:
        return ()


def test_both_models_load_each_from_its_own_file() -> None:
    first, second = RecordingRuntime(MemoryStats(0, 0, 0)), RecordingRuntime(MemoryStats(0, 0, 0))
    pair = PairedRuntime(first, second, Path("rec.onnx"))
    pair.load(Path("det.onnx"), RuntimeOptions())
    assert (first.loaded, second.loaded) == (Path("det.onnx"), Path("rec.onnx"))
    pair.unload()
    assert (first.loaded, second.loaded) == (None, None)


def test_the_first_model_is_unloaded_when_the_second_fails_to_load() -> None:
    first = RecordingRuntime(MemoryStats(0, 0, 0))
    pair = PairedRuntime(first, RecordingRuntime(MemoryStats(0, 0, 0), fails_to_load=True), Path("r"))
    with pytest.raises(RuntimeError):
        pair.load(Path("d"), RuntimeOptions())
    assert first.loaded is None


def test_memory_is_measured_from_before_the_first_load_to_the_latest_figure() -> None:
    # The same memory domain: the second's baseline already holds the first model.
    pair = PairedRuntime(
        RecordingRuntime(MemoryStats(100, 150, 170)), RecordingRuntime(MemoryStats(150, 220, 230)), Path("r")
    )
    assert pair.memory_stats() == MemoryStats(baseline_bytes=100, current_bytes=220, peak_bytes=230)
