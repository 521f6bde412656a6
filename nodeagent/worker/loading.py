"""Building and loading a deployment's servable inside its worker: the capability server for the
verified set's serving config, its runtime loaded and warmed up with one test inference.

Blocking: the worker runs it on a thread. The files were verified by the agent before the worker
was told where they are.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from artifacts import VerifiedArtifactSet
from nodeagent.adapters.base import CapabilityAdapter
from nodeagent.adapters.biencoder_reranking import BiEncoderRerankingAdapter
from nodeagent.adapters.embedding import EmbeddingAdapter, EmbeddingConfig
from nodeagent.adapters.reranking import SCORINGS, RerankingAdapter, RerankingConfig
from nodeagent.runtimes.base import MemoryStats, Runtime, RuntimeOptions
from nodeagent.runtimes.gpu import tensorrt_installed
from nodeagent.runtimes.select import RuntimeKind, create_runtime
from nodeagent.worker.capabilities import CapabilityServer, EmbeddingServer, RerankServer
from streams import codes
from streams.codes import ServingError

SERVING_CONFIG_FILE = "serving_config.json"


def _serving_config(verified: VerifiedArtifactSet) -> dict[str, Any]:
    try:
        verified.manifest.file(SERVING_CONFIG_FILE)
    except KeyError:
        raise ServingError(codes.ARTIFACT_INCOMPLETE.code, f"the set has no {SERVING_CONFIG_FILE}") from None
    data = json.loads(verified.path_of(SERVING_CONFIG_FILE).read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ServingError(codes.ARTIFACT_INCOMPLETE.code, f"{SERVING_CONFIG_FILE} is not an object")
    return data


def _verified_file(verified: VerifiedArtifactSet, name: str) -> Path:
    try:
        verified.manifest.file(name)
    except KeyError:
        raise ServingError(codes.ARTIFACT_INCOMPLETE.code, f"{name} is not in the manifest") from None
    return verified.path_of(name)


def _known(config_type: Any, data: dict[str, Any]) -> dict[str, Any]:
    return {name: data[name] for name in config_type.__dataclass_fields__ if name in data}


@dataclass(frozen=True)
class Servable:
    """What a load needs: the server, the runtime it drives, the model file the runtime loads, and
    the bytes of every model file it holds (what a loaded model holds at the least)."""

    server: CapabilityServer
    runtime: Runtime
    model_path: Path
    weights_bytes: int


def _servable(
    capability: str,
    verified: VerifiedArtifactSet,
    new_runtime: Callable[[], Runtime],
    max_batch: int,
    gpu_index: int | None = None,
) -> Servable:
    data = _serving_config(verified)
    declared = str(data.get("capability", ""))
    name = capability.partition("@")[0]
    if declared and declared.partition("@")[0] != name:
        raise ServingError(codes.CAPABILITY_UNAVAILABLE.code, f"the set serves {declared}, not {capability}")
    if name == "rag.embedding":
        e_config = EmbeddingConfig(**_known(EmbeddingConfig, data))
        adapter = EmbeddingAdapter(_verified_file(verified, e_config.tokenizer_file), e_config)
        runtime = new_runtime()
        return _one_model(EmbeddingServer(adapter, runtime, max_batch), runtime, verified, e_config.onnx_file)
    if name == "rag.reranking":
        r_config = RerankingConfig(**_known(RerankingConfig, data))
        tokenizer = _verified_file(verified, str(data.get("tokenizer_file", "tokenizer.json")))
        runtime = new_runtime()
        server = RerankServer(reranking_adapter(tokenizer, r_config), runtime, max_batch)
        return _one_model(server, runtime, verified, str(data.get("onnx_file", "model.onnx")))
    # The rarer capabilities import their adapters (imaging, audio) only when loaded: a worker
    # starts on the cold load's path, and MiniLM's needs none of them.
    if name == "document.ocr":
        from nodeagent.adapters.ocr import OcrConfig, OcrPipeline
        from nodeagent.adapters.ocr_recognition import load_vocabulary
        from nodeagent.runtimes.paired import PairedRuntime
        from nodeagent.worker.ocr_server import OcrServer

        config = OcrConfig.from_file(verified.path_of(SERVING_CONFIG_FILE))
        keys = _verified_file(verified, config.keys_file)
        pipeline = OcrPipeline(load_vocabulary(keys, use_space_char=config.use_space_char), config)
        detection = _verified_file(verified, config.detection_file)
        recognition = _verified_file(verified, config.recognition_file)
        detector, recognizer = new_runtime(), new_runtime()
        return Servable(
            OcrServer(pipeline, detector, recognizer, max_batch),
            PairedRuntime(detector, recognizer, recognition),
            detection,
            detection.stat().st_size + recognition.stat().st_size,
        )
    if name == "vision.embedding":
        from nodeagent.adapters.vision import VisionEmbeddingAdapter, VisionEmbeddingConfig
        from nodeagent.worker.vision_server import VisionEmbeddingServer

        v_config = VisionEmbeddingConfig.from_dict(data)
        runtime = new_runtime()
        vision = VisionEmbeddingServer(VisionEmbeddingAdapter(v_config), runtime, max_batch)
        return _one_model(vision, runtime, verified, v_config.onnx_file)
    if name == "speech.transcription" and data.get("architecture") == "whisper":
        return _whisper(verified, data, max_batch, gpu_index)
    if name == "speech.transcription":
        from nodeagent.adapters.speech import SpeechConfig, SpeechTranscriptionAdapter
        from nodeagent.adapters.speech import load_vocabulary as load_speech_vocabulary
        from nodeagent.worker.speech_server import TranscriptionServer

        s_config = SpeechConfig.from_dict(data)
        vocabulary = load_speech_vocabulary(_verified_file(verified, s_config.vocabulary_file))
        runtime = new_runtime()
        speech = TranscriptionServer(SpeechTranscriptionAdapter(vocabulary, s_config), runtime, max_batch)
        return _one_model(speech, runtime, verified, s_config.onnx_file)
    raise ServingError(codes.CAPABILITY_UNAVAILABLE.code, f"this agent cannot serve {capability}")


def _whisper(
    verified: VerifiedArtifactSet, data: dict[str, Any], max_batch: int, gpu_index: int | None
) -> Servable:
    """An encoder-decoder speech model in CTranslate2 format, on the node's GPU where CTranslate2
    sees one."""
    from nodeagent.adapters.whisper import WhisperConfig, WhisperTokens, WhisperTranscriptionAdapter
    from nodeagent.runtimes.ctranslate2 import CTranslate2Whisper
    from nodeagent.runtimes.gpu import ctranslate2_cuda_count
    from nodeagent.worker.speech_server import TranscriptionServer

    config = WhisperConfig.from_dict(data)
    tokens = WhisperTokens(_verified_file(verified, config.tokenizer_file))
    for name in ("config.json", "vocabulary.txt"):  # what CTranslate2 reads beside model.bin
        _verified_file(verified, name)
    on_gpu = gpu_index is not None and ctranslate2_cuda_count() > gpu_index
    runtime = CTranslate2Whisper("cuda", gpu_index or 0) if on_gpu else CTranslate2Whisper()
    server = TranscriptionServer(WhisperTranscriptionAdapter(tokens, config), runtime, max_batch)
    return _one_model(server, runtime, verified, config.model_file)


def reranking_adapter(tokenizer: Path, config: RerankingConfig) -> CapabilityAdapter[tuple[str, str], float]:
    """The cross-encoder adapter, or the bi-encoder one where the set says `"scoring": "biencoder"`."""
    if config.scoring not in SCORINGS:
        raise ServingError(
            codes.ARTIFACT_INCOMPLETE.code,
            f"scoring must be one of {sorted(SCORINGS)}, not {config.scoring!r}",
        )
    if config.scoring == "biencoder":
        return BiEncoderRerankingAdapter(tokenizer, config)
    return RerankingAdapter(tokenizer, config)


def _one_model(
    server: CapabilityServer, runtime: Runtime, verified: VerifiedArtifactSet, onnx_file: str
) -> Servable:
    path = _verified_file(verified, onnx_file)
    return Servable(server, runtime, path, path.stat().st_size)


def runtime_for(gpu_index: int | None) -> Runtime:
    if gpu_index is not None and tensorrt_installed():
        return create_runtime(RuntimeKind.TENSORRT, gpu_index)
    return create_runtime(RuntimeKind.ONNXRUNTIME_CPU)


@dataclass(frozen=True)
class Warm:
    """A loaded, warmed-up servable and what its load showed from inside the worker."""

    server: CapabilityServer
    runtime: Runtime
    warmup_ms: float
    weights_bytes: int
    memory: MemoryStats  # the runtime's own view of this process's memory domain


def load_blocking(
    verified: VerifiedArtifactSet,
    capability: str,
    gpu_index: int | None,
    max_batch: int,
    cpu_threads: int,
    *,
    inline_batches: bool = False,
) -> Warm:
    """Load and warm up. Raises ServingError with a stable code on any refusal. `inline_batches`:
    run batches on the event loop's thread (a worker process, whose loop serves only this model).
    `cpu_threads`: the threads a lone batch runs on, and where the server runs batches in lanes,
    how many batches may run at once on one thread each."""
    servable = _servable(capability, verified, lambda: runtime_for(gpu_index), max_batch, gpu_index)
    server, runtime = servable.server, servable.runtime
    server.batcher.inline = inline_batches
    lanes = cpu_threads if server.batcher.run_lane is not None else 1
    server.batcher.lanes = lanes
    try:
        options = RuntimeOptions(intra_op_threads=cpu_threads, lanes=lanes, max_batch=max_batch)
        runtime.load(servable.model_path, options)
        warm_started = time.perf_counter()
        server.test_inference()
        warmup_ms = (time.perf_counter() - warm_started) * 1000
    except ServingError:
        runtime.unload()
        raise
    except Exception as error:
        runtime.unload()
        raise ServingError(
            codes.RESIDENCY_LOAD_FAILED.code, f"runtime load failed: {type(error).__name__}"
        ) from None
    return Warm(server, runtime, warmup_ms, servable.weights_bytes, runtime.memory_stats())
