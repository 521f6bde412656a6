from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nodeagent.runtimes.base import Laned, Runtime, RuntimeOptions
from nodeagent.runtimes.onnx import OnnxRuntimeCpu
from nodeagent.runtimes.process_memory import process_rss_bytes
from streams.codes import ServingError


def test_minilm_io_metadata(minilm_runtime: OnnxRuntimeCpu) -> None:
    assert isinstance(minilm_runtime, Runtime)
    inputs = {spec.name: spec for spec in minilm_runtime.input_specs}
    assert set(inputs) == {"input_ids", "attention_mask", "token_type_ids"}
    assert inputs["input_ids"].dtype == np.int64
    assert inputs["input_ids"].is_dynamic
    (output,) = minilm_runtime.output_specs
    assert output.name == "last_hidden_state"
    assert output.shape[-1] == 384


def test_run_returns_named_outputs(minilm_runtime: OnnxRuntimeCpu) -> None:
    ids = np.array([[101, 7592, 102]], dtype=np.int64)
    outputs = minilm_runtime.run(
        {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
    )
    assert outputs["last_hidden_state"].shape == (1, 3, 384)


def test_missing_input_is_invalid(minilm_runtime: OnnxRuntimeCpu) -> None:
    with pytest.raises(ServingError) as raised:
        minilm_runtime.run({"input_ids": np.array([[101, 102]])})
    assert raised.value.code == "INVALID_INPUT"


def test_memory_is_measured_and_unload_stops_runs(minilm_dir: Path) -> None:
    runtime = OnnxRuntimeCpu()
    runtime.load(minilm_dir / "model.onnx", RuntimeOptions(intra_op_threads=1))
    ids = np.ones((4, 64), dtype=np.int64)
    runtime.run({"input_ids": ids, "attention_mask": ids, "token_type_ids": np.zeros_like(ids)})
    loaded = runtime.memory_stats()
    assert loaded.baseline_bytes > 0
    assert loaded.peak_bytes >= loaded.current_bytes >= loaded.baseline_bytes
    assert loaded.loaded_bytes > 5_000_000  # a 23 MB model cannot load in less
    runtime.unload()
    assert not runtime.is_loaded
    after = runtime.memory_stats()
    assert after.current_bytes == pytest.approx(process_rss_bytes(), rel=0.05)
    # glibc returns the freed session's pages (malloc_trim), so RSS shows the reclaim.
    assert loaded.current_bytes - after.current_bytes > loaded.loaded_bytes // 2
    assert after.peak_bytes == loaded.peak_bytes
    with pytest.raises(ServingError) as raised:
        runtime.run({"input_ids": ids})
    assert raised.value.code == "INFERENCE_FAILED"


def heap_freed_but_resident(mib: int) -> bytearray:
    """Frees `mib` MiB of heap that glibc keeps resident (a block allocated after it pins the heap's
    top), as a process's earlier work leaves it; returns that block, to keep it pinned."""
    blocks = [bytearray(b"x" * 65536) for _ in range(mib * 16)]  # under glibc's mmap threshold
    pin = bytearray(b"y" * 65536)
    del blocks
    return pin


def test_a_loads_baseline_leaves_out_heap_the_process_had_freed(minilm_dir: Path) -> None:
    pin = heap_freed_but_resident(160)
    runtime = OnnxRuntimeCpu()
    runtime.load(minilm_dir / "model.onnx", RuntimeOptions(intra_op_threads=1))
    try:
        loaded = runtime.memory_stats()
        # Measured against a baseline that held the freed heap, the load's own trim of it read as
        # memory the model gave back, and the model as weighing nothing.
        assert loaded.current_bytes >= loaded.baseline_bytes
        assert loaded.loaded_bytes > 5_000_000
    finally:
        runtime.unload()
        del pin


def test_a_lane_runs_the_same_model_on_one_thread_beside_the_wide_session(minilm_dir: Path) -> None:
    runtime = OnnxRuntimeCpu()
    runtime.load(minilm_dir / "model.onnx", RuntimeOptions(intra_op_threads=2, lanes=2))
    ids = np.array([[101, 7592, 2088, 102]], dtype=np.int64)
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
    try:
        assert runtime.lanes == 2
        assert isinstance(runtime, Laned)
        np.testing.assert_allclose(
            runtime.lane.run(feeds)["last_hidden_state"], runtime.run(feeds)["last_hidden_state"], atol=1e-5
        )
    finally:
        runtime.unload()
    assert runtime.lanes == 1


def test_without_lanes_asked_for_a_runtime_has_one_lane(minilm_runtime: OnnxRuntimeCpu) -> None:
    assert minilm_runtime.lanes == 1
