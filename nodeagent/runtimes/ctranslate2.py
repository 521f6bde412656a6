"""CTranslate2 for encoder–decoder speech models (Whisper), on CPU or CUDA, behind the same
`Runtime` interface as ONNX Runtime and TensorRT.

A decoder generates, so the tensors it takes and gives are the generation's: `features`
[n, mels, 3000] float32 (one 30 s window a row), `prompt_ids` [n, k] int32 (each row's decoder
prompt, right-padded with -1) and `temperature` [n] float32 (0: greedy; above: sampling at that
temperature). It returns `token_ids` [n, length] int32 (the generated tokens after the prompt,
right-padded with -1) and `no_speech_prob` [n] float32.
"""

from __future__ import annotations

import gc
import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from nodeagent.runtimes.base import MemoryStats, PeakTracker, RuntimeOptions, Tensor, TensorSpec
from nodeagent.runtimes.process_memory import process_rss_bytes, release_freed_heap
from streams import codes
from streams.codes import ServingError

MAX_TOKENS = 448  # Whisper's decoder context
_INPUTS = (
    TensorSpec("features", ("batch", "mels", "frames"), np.dtype(np.float32)),
    TensorSpec("prompt_ids", ("batch", "prompt"), np.dtype(np.int32)),
    TensorSpec("temperature", ("batch",), np.dtype(np.float32)),
)
_OUTPUTS = (
    TensorSpec("token_ids", ("batch", "length"), np.dtype(np.int32)),
    TensorSpec("no_speech_prob", ("batch",), np.dtype(np.float32)),
)


def _device_used_bytes(device_index: int) -> int:
    """The device's used memory (NVML): what a load on it adds is what the probe measures."""
    pynvml: Any = importlib.import_module("pynvml")
    pynvml.nvmlInit()
    try:
        return int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(device_index)).used)
    finally:
        pynvml.nvmlShutdown()


class CTranslate2Whisper:
    """`Runtime` over `ctranslate2.models.Whisper`; `load` takes the model folder or its model.bin."""

    def __init__(self, device: str = "cpu", device_index: int = 0) -> None:
        self.device, self.device_index = device, device_index
        self.kind = f"ctranslate2-{device}"
        self._model: Any = None
        self._memory = PeakTracker()

    def _used_bytes(self) -> int:
        return _device_used_bytes(self.device_index) if self.device == "cuda" else process_rss_bytes()

    def load(self, model_path: Path, options: RuntimeOptions) -> None:
        ctranslate2: Any = importlib.import_module("ctranslate2")
        if self._model is not None:
            self.unload()
        folder = model_path.parent if model_path.is_file() else model_path
        release_freed_heap()  # a baseline without freed heap the load would reuse (as for ONNX Runtime)
        self._memory.start(self._used_bytes())
        self._model = ctranslate2.models.Whisper(
            str(folder),
            device=self.device,
            device_index=self.device_index,
            # int8 weights on CPU (the fastest there), fp16 on a GPU
            compute_type="int8" if self.device == "cpu" else "float16",
            intra_threads=options.intra_op_threads if self.device == "cpu" else 0,
        )
        self._memory.sample(self._used_bytes())

    def run(self, inputs: Mapping[str, Tensor]) -> dict[str, Tensor]:
        model = self._require_model()
        missing = [spec.name for spec in _INPUTS if spec.name not in inputs]
        if missing:
            raise ServingError(codes.INVALID_INPUT.code, f"missing model inputs: {missing}")
        features = np.ascontiguousarray(inputs["features"], dtype=np.float32)
        prompts = [[int(t) for t in row if t >= 0] for row in np.asarray(inputs["prompt_ids"])]
        temperatures = np.asarray(inputs["temperature"], dtype=np.float32)
        generated: list[list[int]] = [[] for _ in prompts]
        no_speech = np.zeros(len(prompts), dtype=np.float32)
        for temperature in sorted({float(t) for t in temperatures}):  # one generate per setting
            rows = [row for row, t in enumerate(temperatures) if float(t) == temperature]
            results = model.generate(
                _storage(features[rows]),
                [prompts[row] for row in rows],
                beam_size=1,
                sampling_topk=1 if temperature == 0.0 else 0,
                sampling_temperature=max(temperature, 1e-3),
                max_length=MAX_TOKENS,
                return_no_speech_prob=True,
            )
            for row, result in zip(rows, results, strict=True):
                generated[row] = list(result.sequences_ids[0])
                no_speech[row] = result.no_speech_prob
        self._memory.sample(self._used_bytes())
        token_ids = np.full((len(prompts), max(1, *map(len, generated))), -1, dtype=np.int32)
        for row, tokens in enumerate(generated):
            token_ids[row, : len(tokens)] = tokens
        return {"token_ids": token_ids, "no_speech_prob": no_speech}

    def unload(self) -> None:
        self._model = None
        gc.collect()
        release_freed_heap()

    def memory_stats(self) -> MemoryStats:
        return self._memory.stats(self._used_bytes())

    @property
    def is_loaded(self) -> bool:
        return self._model is not None

    @property
    def input_specs(self) -> tuple[TensorSpec, ...]:
        return _INPUTS

    @property
    def output_specs(self) -> tuple[TensorSpec, ...]:
        return _OUTPUTS

    def _require_model(self) -> Any:
        if self._model is None:
            raise ServingError(codes.INFERENCE_FAILED.code, "no model is loaded")
        return self._model


def _storage(features: Tensor) -> Any:
    ctranslate2: Any = importlib.import_module("ctranslate2")
    return ctranslate2.StorageView.from_array(np.ascontiguousarray(features, dtype=np.float32))
