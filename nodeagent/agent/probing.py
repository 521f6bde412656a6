"""A probe on this node: the candidate loaded in a worker of its own (measured as a residency's is),
its fixed test inference run and checked, the worker killed, and what all of it showed."""

from __future__ import annotations

from nodeagent.agent.artifact_cache import ArtifactCache, Progress
from nodeagent.agent.hardware import Accelerator
from nodeagent.agent.residency import LoadRequest, start_worker, stop_worker
from nodeagent.agent.spare import SpareWorker
from nodeagent.agent.workers import Worker
from nodeagent.worker.protocol import Tested
from streams.codes import ServingError
from streams.events.control import HealthLayers, ProbeCompleted
from streams.messages import ProbeJob

PROBE_MAX_BATCH = 8


async def run_probe(
    job: ProbeJob,
    accelerator: Accelerator,
    cache: ArtifactCache,
    cpu_threads: int,
    fingerprint: str,
    probing: dict[str, Worker],
    held: frozenset[str],
    progress: Progress | None = None,
    spare: SpareWorker | None = None,
) -> ProbeCompleted:
    """The probe's findings; raises ServingError where the candidate does not load. While it runs,
    its worker is in `probing` (by accelerator), so telemetry counts its memory."""
    request = LoadRequest(
        job.candidate_id,
        job.artifact_set_id,
        job.artifact_root,
        job.manifest,
        job.capability,
        accelerator,
        PROBE_MAX_BATCH,
        cpu_threads,
    )
    worker, measured = await start_worker(cache, request, held, progress, spare)
    probing[accelerator.id] = worker
    try:
        model_ok, detail, output = True, "", await worker.test_inference()
    except ServingError as error:  # an engine fault: the probe's finding, and the model is unloaded
        model_ok, detail, output = False, f"{error.code}: {error.message}", Tested(0.0, 0, False)
    finally:
        del probing[accelerator.id]
        reclaimed = await stop_worker(accelerator, worker, measured)
    return ProbeCompleted(
        candidate_id=job.candidate_id,
        probe_id=job.probe_id,
        node_id=job.node_id,
        accelerator_id=job.accelerator_id,
        hardware_fingerprint=fingerprint,
        runtime=measured.runtime,
        health=HealthLayers(process=True, runtime=True, model=model_ok, detail=detail),
        output_valid=model_ok,
        baseline_bytes=measured.baseline_bytes,
        loaded_bytes=measured.loaded_bytes,
        peak_bytes=measured.peak_bytes,
        cold_load_ms=measured.cold_load_ms,
        inference_ms=output.inference_ms,
        unload_reclaimed_bytes=max(0, reclaimed),
        output_dimension=output.dimension,
        output_normalized=output.normalized,
        manifest_sha256=job.manifest_sha256,
        weights_bytes=measured.weights_bytes,
    )
