"""A residency: one deployment's model loaded in its own worker process on one accelerator, with
the memory it was measured at.

Loading verifies the artifact set first (fetched into the node's cache where it lacks it;
confinement, sha256 and size, no pickle, no remote code) while the worker starts, then has the
worker load the runtime and run one warm-up inference. The residency's memory is the worker
process's own: its RSS on the CPU device, its NVML figure on a GPU. Nothing else's memory is in
it, and killing the worker gives all of it back.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from artifacts import ArtifactManifest
from nodeagent.agent.artifact_cache import ArtifactCache, Progress
from nodeagent.agent.hardware import Accelerator
from nodeagent.agent.spare import SpareWorker
from nodeagent.agent.workers import Worker, WorkerDied
from nodeagent.worker.protocol import Load, Loaded
from streams import codes
from streams.codes import ServingError
from streams.events.control import loaded_model_bytes


@dataclass(frozen=True)
class LoadMeasurement:
    runtime: str
    baseline_bytes: int
    loaded_bytes: int
    peak_bytes: int
    cold_load_ms: float  # verification + worker start + runtime load + warm-up: what a cold start costs
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
    worker: Worker
    measurement: LoadMeasurement
    artifact_set_id: str = ""  # whose cached files back it: never evicted while it is loaded
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


async def verify_integrity(
    cache: ArtifactCache, set_id: str, folder: str, records: list[dict[str, object]], held: frozenset[str]
) -> int:
    """Every file present (fetched where the node lacks it), confined, of the manifest's size and
    sha256; returns the bytes checked. Pickles and remote code pass here (they are facts for the
    production gates); loads refuse them."""
    verified = await cache.verified(set_id, folder, manifest_from_job(records), held, allow_risks=True)
    return verified.bytes_verified


@dataclass(frozen=True)
class LoadRequest:
    """What a load (or a probe's load) asks of this node."""

    name: str  # the deployment or candidate, for the worker's messages
    artifact_set_id: str
    artifact_root: str  # the set's folder name
    manifest: list[dict[str, object]]
    capability: str
    accelerator: Accelerator
    max_batch: int
    cpu_threads: int


async def start_worker(
    cache: ArtifactCache,
    request: LoadRequest,
    held: frozenset[str],
    progress: Progress | None = None,
    spare: SpareWorker | None = None,
) -> tuple[Worker, LoadMeasurement]:
    """A worker with the model loaded and warmed up, and what it holds. The worker is the spare
    where there is one, else it starts (its interpreter and runtime imports) while the files are
    fetched where needed and verified; it hears of them only once they are. `held`: the sets other
    workers hold (never evicted from the cache). Raises ServingError with a stable code on any
    refusal, and leaves no worker behind; the next spare starts once the load has ended."""
    started = time.perf_counter()
    try:
        worker = await (spare.take(request.name) if spare is not None else Worker.spawn(request.name))
        return worker, await _load(worker, cache, request, held, progress, started)
    finally:
        if spare is not None:
            spare.refill()


async def _load(
    worker: Worker,
    cache: ArtifactCache,
    request: LoadRequest,
    held: frozenset[str],
    progress: Progress | None,
    started: float,
) -> LoadMeasurement:
    try:
        manifest = manifest_from_job(request.manifest)
        verified = await cache.verified(
            request.artifact_set_id, request.artifact_root, manifest, held, progress=progress
        )
        accelerator = request.accelerator
        call = Load(
            folder=str(verified.root),
            manifest=verified.manifest.to_dict(),
            bytes_verified=verified.bytes_verified,
            capability=request.capability,
            gpu_index=accelerator.device_index if accelerator.is_gpu else None,
            max_batch=request.max_batch,
            cpu_threads=request.cpu_threads,
            serves=request.name,
        )
        try:
            loaded = await worker.load(call)
        except WorkerDied:  # out of memory, say: the load failed, whatever it would have served
            detail = f"the worker process died while loading ({worker.how})"
            raise ServingError(codes.RESIDENCY_LOAD_FAILED.code, detail) from None
        measurement = _measured(accelerator, worker, loaded, (time.perf_counter() - started) * 1000)
        if measurement.measured_bytes <= 0:
            raise ServingError(
                codes.RESIDENCY_LOAD_FAILED.code, "the load showed no resident memory (loaded <= baseline)"
            )
    except BaseException:
        await worker.kill()
        raise
    return measurement


def _measured(
    accelerator: Accelerator, worker: Worker, loaded: Loaded, cold_load_ms: float
) -> LoadMeasurement:
    """The worker's memory: from its start (nothing) to what it holds warmed up. Where the device
    cannot tell one process's memory, what the worker's runtime saw of its domain stands in."""
    held = accelerator.read_process(worker.pid)
    if held is None:
        baseline, current, peak = loaded.baseline_bytes, loaded.current_bytes, loaded.peak_bytes
    else:
        baseline, current, peak = 0, held.current_bytes, max(held.peak_bytes, loaded.peak_bytes)
    return LoadMeasurement(
        runtime=loaded.runtime,
        baseline_bytes=baseline,
        loaded_bytes=current,
        peak_bytes=max(peak, current),
        cold_load_ms=cold_load_ms,
        warmup_ms=loaded.warmup_ms,
        weights_bytes=loaded.weights_bytes,
    )


async def stop_worker(accelerator: Accelerator, worker: Worker, measured: LoadMeasurement) -> int:
    """Kill the worker and return the bytes that gave back: all it held (what the device shows of
    it just before, else what it was measured at)."""
    held = accelerator.read_process(worker.pid)
    await worker.kill()
    if held is None:
        return measured.loaded_bytes - measured.baseline_bytes
    return held.current_bytes
