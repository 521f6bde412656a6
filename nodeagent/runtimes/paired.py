"""Two models that load, measure and unload as one residency (OCR's detector and recogniser).

The agent holds one `Runtime` per residency; a capability served by two models in a row gets this
pair in its place. Both runtimes measure the same memory domain (the process, or the device), so
the pair's baseline is the one taken before the first load and its current figure the latest.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from nodeagent.runtimes.base import MemoryStats, Runtime, RuntimeOptions, Tensor, TensorSpec


class PairedRuntime:
    """`first` loads from the path `load` is given, `second` from `second_path`; `run` is the
    first's (the server drives each model through its own runtime)."""

    def __init__(self, first: Runtime, second: Runtime, second_path: Path) -> None:
        self.first, self.second, self.second_path = first, second, second_path
        self.kind = first.kind

    def load(self, model_path: Path, options: RuntimeOptions) -> None:
        self.first.load(model_path, options)
        try:
            self.second.load(self.second_path, options)
        except BaseException:
            self.first.unload()
            raise

    def run(self, inputs: Mapping[str, Tensor]) -> dict[str, Tensor]:
        return self.first.run(inputs)

    def unload(self) -> None:
        try:
            self.second.unload()
        finally:
            self.first.unload()

    def memory_stats(self) -> MemoryStats:
        first, second = self.first.memory_stats(), self.second.memory_stats()
        return MemoryStats(
            baseline_bytes=first.baseline_bytes,
            current_bytes=second.current_bytes,
            peak_bytes=max(first.peak_bytes, second.peak_bytes),
        )

    @property
    def input_specs(self) -> tuple[TensorSpec, ...]:
        return self.first.input_specs + self.second.input_specs

    @property
    def output_specs(self) -> tuple[TensorSpec, ...]:
        return self.first.output_specs + self.second.output_specs
