"""TensorRT runtime: build (or reuse) an engine from ONNX and run it with cuda-python.

Nothing here imports tensorrt or cuda at module load; `load` does, so nodes without a GPU can
import the agent. Pure planning (profiles, cache key) lives in `tensorrt_plan` and is re-exported.
"""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from artifacts.hashing import sha256_of_file
from nodeagent.runtimes.base import Dim, MemoryStats, PeakTracker, RuntimeOptions, Tensor, TensorSpec
from nodeagent.runtimes.gpu import compute_capability, cuda_check, gpu_used_bytes, import_cudart
from nodeagent.runtimes.tensorrt_plan import (
    ShapeProfile,
    derive_profiles,
    engine_cache_key,
    engine_file_name,
)
from streams import codes
from streams.codes import ServingError

__all__ = ["ShapeProfile", "TensorRTRuntime", "derive_profiles", "engine_cache_key"]

DEFAULT_ENGINE_CACHE_DIR = Path.home() / ".cache" / "modelforge" / "engines"


def import_tensorrt() -> ModuleType:
    try:
        return importlib.import_module("tensorrt")
    except ImportError as exc:
        raise ServingError(
            codes.RUNTIME_DEPENDENCY_MISSING.code,
            "tensorrt is not installed (pip install 'modelforge-serving[gpu]')",
        ) from exc


@dataclass
class _DeviceBuffer:
    spec: TensorSpec
    is_input: bool
    pointer: int
    capacity_bytes: int


def _onnx_input_specs(trt: ModuleType, network: Any) -> list[TensorSpec]:
    specs = []
    for index in range(network.num_inputs):
        tensor = network.get_input(index)
        shape: tuple[Dim, ...] = tuple(None if dim < 0 else int(dim) for dim in tensor.shape)
        specs.append(TensorSpec(tensor.name, shape, np.dtype(trt.nptype(tensor.dtype))))
    return specs


class TensorRTRuntime:
    """`Runtime` over a TensorRT engine, with device buffers preallocated at the profile maxima."""

    kind = "tensorrt"

    def __init__(self, device_index: int = 0) -> None:
        self.device_index = device_index
        self.cache_key: str | None = None
        self.engine_was_built = False  # False: reused from the cache
        self._lock = threading.Lock()  # an execution context runs one batch at a time
        self._memory = PeakTracker()
        self._engine: Any = None
        self._context: Any = None
        self._stream: Any = None
        self._buffers: list[_DeviceBuffer] = []
        self._cudart: ModuleType | None = None

    # -- load ---------------------------------------------------------------------------------

    def load(self, model_path: Path, options: RuntimeOptions) -> None:
        if self._engine is not None:
            self.unload()
        try:
            self._load(model_path, options)
        except ServingError as error:
            self.unload()  # free whatever a half-finished load allocated
            if error.code == codes.INFERENCE_FAILED.code:  # a CUDA call failed during load
                raise ServingError(codes.RESIDENCY_LOAD_FAILED.code, error.message) from error
            raise

    def _load(self, model_path: Path, options: RuntimeOptions) -> None:
        trt = import_tensorrt()
        cudart = self._cudart = import_cudart()
        cuda_check(cudart.cudaSetDevice(self.device_index))
        self._memory.start(gpu_used_bytes(cudart, self.device_index))
        logger = trt.Logger(trt.Logger.WARNING)
        builder = trt.Builder(logger)
        network = builder.create_network(0)  # TensorRT 10: explicit batch is the only mode
        parser = trt.OnnxParser(network, logger)
        if not parser.parse_from_file(str(model_path)):
            errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
            raise ServingError(
                codes.RESIDENCY_LOAD_FAILED.code, f"TensorRT cannot parse {model_path.name}: {errors}"
            )
        profiles = derive_profiles(_onnx_input_specs(trt, network), options.max_batch, options.max_seq)
        onnx_sha256, _ = sha256_of_file(model_path)
        capability = compute_capability(cudart, self.device_index)
        self.cache_key = engine_cache_key(
            onnx_sha256, trt.__version__, capability, profiles, options.precision
        )
        cache_dir = options.engine_cache_dir or DEFAULT_ENGINE_CACHE_DIR
        engine_path = cache_dir / engine_file_name(self.cache_key)
        if engine_path.is_file():
            serialized = engine_path.read_bytes()
            self.engine_was_built = False
        else:
            serialized = self._build(trt, builder, network, profiles, options)
            _write_atomically(engine_path, serialized)
            self.engine_was_built = True
        self._engine = trt.Runtime(logger).deserialize_cuda_engine(serialized)
        if self._engine is None:
            raise ServingError(codes.RESIDENCY_LOAD_FAILED.code, f"cannot deserialize engine {engine_path}")
        self._context = self._engine.create_execution_context()
        self._stream = cuda_check(cudart.cudaStreamCreate())
        self._allocate_buffers(trt, profiles)
        self._memory.sample(gpu_used_bytes(cudart, self.device_index))

    @staticmethod
    def _build(
        trt: ModuleType,
        builder: Any,
        network: Any,
        profiles: tuple[ShapeProfile, ...],
        options: RuntimeOptions,
    ) -> bytes:
        config = builder.create_builder_config()
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, options.workspace_bytes)
        precision_flags = {"fp16": "FP16", "bf16": "BF16", "int8": "INT8"}
        if options.precision in precision_flags:
            config.set_flag(getattr(trt.BuilderFlag, precision_flags[options.precision]))
        profile = builder.create_optimization_profile()
        for shape_profile in profiles:
            profile.set_shape(
                shape_profile.input_name,
                shape_profile.min_shape,
                shape_profile.opt_shape,
                shape_profile.max_shape,
            )
        config.add_optimization_profile(profile)
        serialized = builder.build_serialized_network(network, config)
        if serialized is None:
            raise ServingError(codes.RESIDENCY_LOAD_FAILED.code, "TensorRT engine build failed")
        return bytes(serialized)

    def _allocate_buffers(self, trt: ModuleType, profiles: tuple[ShapeProfile, ...]) -> None:
        cudart = self._require_cudart()
        for shape_profile in profiles:
            self._context.set_input_shape(shape_profile.input_name, shape_profile.max_shape)
        for index in range(self._engine.num_io_tensors):
            name = self._engine.get_tensor_name(index)
            is_input = self._engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT
            max_shape = tuple(int(dim) for dim in self._context.get_tensor_shape(name))
            if any(dim < 0 for dim in max_shape):
                raise ServingError(
                    codes.RESIDENCY_LOAD_FAILED.code, f"output {name!r} has a data-dependent shape"
                )
            dtype = np.dtype(trt.nptype(self._engine.get_tensor_dtype(name)))
            engine_shape: tuple[Dim, ...] = tuple(
                None if dim < 0 else int(dim) for dim in self._engine.get_tensor_shape(name)
            )
            capacity = max(1, int(np.prod(max_shape)) * dtype.itemsize)
            pointer = int(cuda_check(cudart.cudaMalloc(capacity)))
            self._buffers.append(
                _DeviceBuffer(TensorSpec(name, engine_shape, dtype), is_input, pointer, capacity)
            )
            self._context.set_tensor_address(name, pointer)

    # -- run ----------------------------------------------------------------------------------

    def run(self, inputs: Mapping[str, Tensor]) -> dict[str, Tensor]:
        cudart = self._require_cudart()
        if self._context is None:
            raise ServingError(codes.INFERENCE_FAILED.code, "no engine is loaded")
        kinds = cudart.cudaMemcpyKind
        with self._lock:
            host_inputs = []
            for buffer in (b for b in self._buffers if b.is_input):
                if buffer.spec.name not in inputs:
                    raise ServingError(codes.INVALID_INPUT.code, f"missing model input {buffer.spec.name!r}")
                array = np.ascontiguousarray(inputs[buffer.spec.name], dtype=buffer.spec.dtype)
                if array.nbytes > buffer.capacity_bytes:
                    raise ServingError(
                        codes.INVALID_INPUT.code,
                        f"{buffer.spec.name} {array.shape} exceeds the engine profile",
                    )
                self._context.set_input_shape(buffer.spec.name, array.shape)
                host_inputs.append(array)  # kept alive until the stream synchronises
                cuda_check(
                    cudart.cudaMemcpyAsync(
                        buffer.pointer,
                        array.ctypes.data,
                        array.nbytes,
                        kinds.cudaMemcpyHostToDevice,
                        self._stream,
                    )
                )
            outputs: dict[str, Tensor] = {}
            for buffer in (b for b in self._buffers if not b.is_input):
                shape = tuple(int(dim) for dim in self._context.get_tensor_shape(buffer.spec.name))
                outputs[buffer.spec.name] = np.empty(shape, dtype=buffer.spec.dtype)
            if not self._context.execute_async_v3(_handle(self._stream)):
                raise ServingError(codes.INFERENCE_FAILED.code, "execute_async_v3 failed")
            for buffer in (b for b in self._buffers if not b.is_input):
                host = outputs[buffer.spec.name]
                cuda_check(
                    cudart.cudaMemcpyAsync(
                        host.ctypes.data,
                        buffer.pointer,
                        host.nbytes,
                        kinds.cudaMemcpyDeviceToHost,
                        self._stream,
                    )
                )
            cuda_check(cudart.cudaStreamSynchronize(self._stream))
            del host_inputs
        self._memory.sample(gpu_used_bytes(cudart, self.device_index))
        return outputs

    # -- unload / metadata --------------------------------------------------------------------

    def unload(self) -> None:
        cudart = self._cudart
        with self._lock:
            if cudart is not None:
                for buffer in self._buffers:
                    cuda_check(cudart.cudaFree(buffer.pointer))
                if self._stream is not None:
                    cuda_check(cudart.cudaStreamDestroy(self._stream))
            self._buffers = []
            self._context = None  # the context must go before its engine
            self._engine = None
            self._stream = None

    def memory_stats(self) -> MemoryStats:
        return self._memory.stats(gpu_used_bytes(self._require_cudart(), self.device_index))

    @property
    def input_specs(self) -> tuple[TensorSpec, ...]:
        return tuple(b.spec for b in self._buffers if b.is_input)

    @property
    def output_specs(self) -> tuple[TensorSpec, ...]:
        return tuple(b.spec for b in self._buffers if not b.is_input)

    def _require_cudart(self) -> ModuleType:
        if self._cudart is None:
            raise ServingError(codes.INFERENCE_FAILED.code, "no engine is loaded")
        return self._cudart


def _handle(stream: Any) -> int:
    """cuda-python stream objects convert to the raw handle TensorRT expects."""
    return int(stream)


def _write_atomically(path: Path, data: bytes) -> None:
    # Several agents may build the same engine; rename makes the last complete write win.
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_bytes(data)
    os.replace(temporary, path)
