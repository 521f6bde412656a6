"""ONNX Runtime on CPU: the runtime for development, CI and GPU-less nodes."""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from nodeagent.runtimes.base import Dim, MemoryStats, PeakTracker, RuntimeOptions, Tensor, TensorSpec
from nodeagent.runtimes.process_memory import process_rss_bytes, release_freed_heap
from streams import codes
from streams.codes import ServingError

_ORT_TYPES: dict[str, np.dtype[Any]] = {
    "tensor(float)": np.dtype(np.float32),
    "tensor(float16)": np.dtype(np.float16),
    "tensor(double)": np.dtype(np.float64),
    "tensor(int64)": np.dtype(np.int64),
    "tensor(int32)": np.dtype(np.int32),
    "tensor(int8)": np.dtype(np.int8),
    "tensor(uint8)": np.dtype(np.uint8),
    "tensor(bool)": np.dtype(np.bool_),
}


def _spec(node: Any) -> TensorSpec:
    # Unlisted element types (strings, maps) do not occur in the models we serve; float32 is a
    # placeholder that makes a feed of the wrong kind fail loudly in onnxruntime.
    shape: tuple[Dim, ...] = tuple(dim if isinstance(dim, int | str) else None for dim in node.shape)
    return TensorSpec(name=node.name, shape=shape, dtype=_ORT_TYPES.get(node.type, np.dtype(np.float32)))


def session_options_for(options: RuntimeOptions) -> ort.SessionOptions:
    session_options = ort.SessionOptions()
    session_options.intra_op_num_threads = options.intra_op_threads
    session_options.inter_op_num_threads = options.inter_op_threads
    # Operators one after another: parallel ones only fight the event loop (and other lanes) for cores.
    session_options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    session_options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    # Spinning worker threads burn a core between batches, starving the agent's event loop.
    session_options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return session_options


class _Lane:
    """Runs a batch on the runtime's one-thread session."""

    def __init__(self, runtime: OnnxRuntimeCpu) -> None:
        self._runtime = runtime

    def run(self, inputs: Mapping[str, Tensor]) -> dict[str, Tensor]:
        return self._runtime.run(inputs, one_thread=True)


class OnnxRuntimeCpu:
    """`Runtime` over an onnxruntime InferenceSession with the CPU execution provider; `Laned` where
    loaded with `lanes` > 1: a lane runs on a second session with one intra-op thread (the same
    session where that already has one), which ONNX Runtime lets several threads run at once."""

    kind = "onnxruntime-cpu"

    def __init__(self) -> None:
        self._session: ort.InferenceSession | None = None
        self._one_thread: ort.InferenceSession | None = None
        self._lanes = 1
        self._lane = _Lane(self)
        self._inputs: tuple[TensorSpec, ...] = ()
        self._outputs: tuple[TensorSpec, ...] = ()
        self._memory = PeakTracker()

    def load(self, model_path: Path, options: RuntimeOptions) -> None:
        if self._session is not None:
            self.unload()
        # Freed heap glibc still holds would count in the baseline and then, reused by the load or
        # handed back by its trim below, make the model weigh less than it does.
        release_freed_heap()
        self._memory.start(process_rss_bytes())
        self._session = ort.InferenceSession(
            str(model_path), sess_options=session_options_for(options), providers=["CPUExecutionProvider"]
        )
        self._lanes = max(1, options.lanes)
        self._one_thread = self._session
        if self._lanes > 1 and options.intra_op_threads > 1:
            self._one_thread = ort.InferenceSession(
                str(model_path),
                sess_options=session_options_for(dataclasses.replace(options, intra_op_threads=1)),
                providers=["CPUExecutionProvider"],
            )
        self._inputs = tuple(_spec(node) for node in self._session.get_inputs())
        self._outputs = tuple(_spec(node) for node in self._session.get_outputs())
        # Building a session frees much of what it allocated (the parsed model; MiniLM's int8
        # weights folded to float32), but glibc keeps the freed heap resident: ~60 MiB a MiniLM
        # session, which no run reuses since runs allocate from ONNX Runtime's own arena.
        release_freed_heap()
        self._memory.sample(process_rss_bytes())

    def run(self, inputs: Mapping[str, Tensor], *, one_thread: bool = False) -> dict[str, Tensor]:
        session = self._require_session()
        if one_thread and self._one_thread is not None:
            session = self._one_thread
        missing = [spec.name for spec in self._inputs if spec.name not in inputs]
        if missing:
            raise ServingError(codes.INVALID_INPUT.code, f"missing model inputs: {missing}")
        feeds = {
            spec.name: np.ascontiguousarray(inputs[spec.name], dtype=spec.dtype) for spec in self._inputs
        }
        names = [spec.name for spec in self._outputs]
        results = session.run(names, feeds)
        self._memory.sample(process_rss_bytes())
        return {name: np.asarray(value) for name, value in zip(names, results, strict=True)}

    def session_options(self) -> ort.SessionOptions:
        """The options the loaded session runs with (threads, optimisation level)."""
        return self._require_session().get_session_options()

    def unload(self) -> None:
        self._session = self._one_thread = None
        self._lanes = 1
        gc.collect()
        release_freed_heap()

    def memory_stats(self) -> MemoryStats:
        return self._memory.stats(process_rss_bytes())

    @property
    def lanes(self) -> int:
        return self._lanes

    @property
    def lane(self) -> _Lane:
        return self._lane

    @property
    def is_loaded(self) -> bool:
        return self._session is not None

    @property
    def input_specs(self) -> tuple[TensorSpec, ...]:
        return self._inputs

    @property
    def output_specs(self) -> tuple[TensorSpec, ...]:
        return self._outputs

    def _require_session(self) -> ort.InferenceSession:
        if self._session is None:
            raise ServingError(codes.INFERENCE_FAILED.code, "no model is loaded")
        return self._session
