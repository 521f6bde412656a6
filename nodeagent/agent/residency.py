"""A residency: one deployment's model loaded on one accelerator, with the memory it was measured at.

Loading verifies the artifact set first (confinement, sha256 and size, no pickle, no remote code),
then loads the runtime and runs one warm-up inference, measuring the runtime's memory domain
(process RSS on the CPU device, device memory on a GPU) before, after load and at the warm-up's
peak. These functions block: the agent runs them on a worker thread.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodeagent.adapters.embedding import EmbeddingAdapter, EmbeddingConfig
from nodeagent.adapters.ocr import OcrConfig, OcrPipeline
from nodeagent.adapters.ocr_recognition import load_vocabulary
from nodeagent.adapters.reranking import RerankingAdapter, RerankingConfig
from nodeagent.adapters.speech import SpeechConfig, SpeechTranscriptionAdapter
from nodeagent.adapters.speech import load_vocabulary as load_speech_vocabulary
from nodeagent.adapters.vision import VisionEmbeddingAdapter, VisionEmbeddingConfig
from nodeagent.agent.capabilities import CapabilityServer, EmbeddingServer, RerankServer
from nodeagent.agent.hardware import Accelerator
from nodeagent.agent.ocr_server import OcrServer
from nodeagent.agent.speech_server import TranscriptionServer
from nodeagent.agent.vision_server import VisionEmbeddingServer
from nodeagent.artifacts import (
    ArtifactManifest,
    VerifiedArtifactSet,
    resolve_artifact_path,
    verify_artifact_set,
)
from nodeagent.runtimes import Runtime, RuntimeOptions
from nodeagent.runtimes.paired import PairedRuntime
from nodeagent.runtimes.select import RuntimeKind, create_runtime, tensorrt_installed
from nodeagent.settings import DEFAULT_CPU_THREADS
from streams import codes
from streams.codes import ServingError
from streams.events.control import loaded_model_bytes

SERVING_CONFIG_FILE = "serving_config.json"


@dataclass(frozen=True)
class LoadMeasurement:
    runtime: str
    baseline_bytes: int
    loaded_bytes: int
    peak_bytes: int
    cold_load_ms: float  # verification + runtime load + warm-up: the time a cold start costs
    warmup_ms: float
    weights_bytes: int = 0  # the model file's size: what a loaded model holds at the least

    @property
    def measured_bytes(self) -> int:
        return loaded_model_bytes(self.baseline_bytes, self.loaded_bytes, self.weights_bytes)


@dataclass
class Residency:
    deployment_id: str
    accelerator_id: str
    capability: str
    generation: int
    runtime: Runtime
    server: CapabilityServer
    measurement: LoadMeasurement
    in_flight: int = 0
    idle: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.idle.set()

    def started(self) -> None:
        self.in_flight += 1
        self.idle.clear()

    def finished(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0:
            self.idle.set()


def manifest_from_job(records: list[dict[str, object]]) -> ArtifactManifest:
    """The job's manifest (ArtifactFile records: path, sha256, size, format) as the verifier's type."""
    try:
        files = [
            {
                "path": r["path"],
                "sha256": r["sha256"],
                "size_bytes": r.get("size_bytes", r.get("size")),
                "format": r["format"],
            }
            for r in records
        ]
        return ArtifactManifest.from_dict({"files": files})
    except ServingError:
        raise
    except (KeyError, TypeError, ValueError) as error:
        raise ServingError(codes.ARTIFACT_INCOMPLETE.code, f"malformed manifest: {error}") from None


def verify(node_root: Path, artifact_root: str, records: list[dict[str, object]]) -> VerifiedArtifactSet:
    """Confine the set's folder to the node's artifact root, then verify every file in it."""
    folder = resolve_artifact_path(node_root, artifact_root)
    if not folder.is_dir():
        raise ServingError(codes.ARTIFACT_NOT_VERIFIED.code, f"artifact folder {artifact_root!r} is missing")
    return verify_artifact_set(folder, manifest_from_job(records))


def verify_integrity(node_root: Path, artifact_root: str, records: list[dict[str, object]]) -> int:
    """Every file present, confined, of the manifest's size and sha256; returns the bytes checked.
    Pickles and remote code pass here (they are facts for the production gates); loads refuse them."""
    folder = resolve_artifact_path(node_root, artifact_root)
    if not folder.is_dir():
        raise ServingError(codes.ARTIFACT_NOT_VERIFIED.code, f"artifact folder {artifact_root!r} is missing")
    manifest = manifest_from_job(records)
    return verify_artifact_set(folder, manifest, allow_pickle=True, allow_remote_code=True).bytes_verified


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
    capability: str, verified: VerifiedArtifactSet, new_runtime: Callable[[], Runtime], max_batch: int
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
        server = RerankServer(RerankingAdapter(tokenizer, r_config), runtime, max_batch)
        return _one_model(server, runtime, verified, str(data.get("onnx_file", "model.onnx")))
    if name == "document.ocr":
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
        v_config = VisionEmbeddingConfig.from_dict(data)
        runtime = new_runtime()
        vision = VisionEmbeddingServer(VisionEmbeddingAdapter(v_config), runtime, max_batch)
        return _one_model(vision, runtime, verified, v_config.onnx_file)
    if name == "speech.transcription":
        s_config = SpeechConfig.from_dict(data)
        vocabulary = load_speech_vocabulary(_verified_file(verified, s_config.vocabulary_file))
        runtime = new_runtime()
        speech = TranscriptionServer(SpeechTranscriptionAdapter(vocabulary, s_config), runtime, max_batch)
        return _one_model(speech, runtime, verified, s_config.onnx_file)
    raise ServingError(codes.CAPABILITY_UNAVAILABLE.code, f"this agent cannot serve {capability}")


def _one_model(
    server: CapabilityServer, runtime: Runtime, verified: VerifiedArtifactSet, onnx_file: str
) -> Servable:
    path = _verified_file(verified, onnx_file)
    return Servable(server, runtime, path, path.stat().st_size)


def runtime_for(accelerator: Accelerator) -> Runtime:
    if accelerator.is_gpu and tensorrt_installed():
        return create_runtime(RuntimeKind.TENSORRT, accelerator.device_index)
    return create_runtime(RuntimeKind.ONNXRUNTIME_CPU)


def load_blocking(
    node_root: Path,
    artifact_root: str,
    manifest: list[dict[str, object]],
    capability: str,
    accelerator: Accelerator,
    max_batch: int,
    cpu_threads: int = DEFAULT_CPU_THREADS,
) -> tuple[Runtime, CapabilityServer, LoadMeasurement]:
    """Verify, load, warm up and measure. Raises ServingError with a stable code on any refusal."""
    started = time.perf_counter()
    verified = verify(node_root, artifact_root, manifest)
    servable = _servable(capability, verified, lambda: runtime_for(accelerator), max_batch)
    server, runtime = servable.server, servable.runtime
    try:
        runtime.load(servable.model_path, RuntimeOptions(intra_op_threads=cpu_threads, max_batch=max_batch))
        loaded = runtime.memory_stats()
        warm_started = time.perf_counter()
        server.test_inference()
        warmup_ms = (time.perf_counter() - warm_started) * 1000
        peak = runtime.memory_stats()
    except ServingError:
        runtime.unload()
        raise
    except Exception as error:
        runtime.unload()
        raise ServingError(
            codes.RESIDENCY_LOAD_FAILED.code, f"runtime load failed: {type(error).__name__}"
        ) from None
    measurement = LoadMeasurement(
        runtime=runtime.kind,
        baseline_bytes=loaded.baseline_bytes,
        loaded_bytes=loaded.current_bytes,
        peak_bytes=max(peak.peak_bytes, loaded.current_bytes),
        cold_load_ms=(time.perf_counter() - started) * 1000,
        warmup_ms=warmup_ms,
        weights_bytes=servable.weights_bytes,
    )
    if measurement.measured_bytes <= 0:
        runtime.unload()
        raise ServingError(
            codes.RESIDENCY_LOAD_FAILED.code, "the load showed no resident memory (loaded <= baseline)"
        )
    return runtime, server, measurement


def unload_blocking(runtime: Runtime) -> int:
    """Unload and return the bytes the runtime's memory domain gave back (≤ 0: nothing shown)."""
    before = runtime.memory_stats().current_bytes
    runtime.unload()
    return before - runtime.memory_stats().current_bytes
