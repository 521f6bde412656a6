"""What each control job does on this node, and the facts it appends (accelerator aggregate, with
`ExpectedVersion.ANY`: they are observations; the gateway's decisions carry expected versions).

load:   ResidencyLoading → ResidencyLoaded (measured) | ResidencyLoadFailed (code)
unload: ResidencyUnloading → ResidencyUnloaded (reclaimed bytes) | ResidencyUnloadFailed
health: ResidencyHealthChecked (process, runtime, model layers)
drain:  ResidencyDrained (no new invokes; in-flight ones finished)
probe:  ProbeCompleted | ProbeFailed (candidate aggregate): load → health → test inference → unload
verify: ArtifactSetVerified | ArtifactSetVerificationFailed (artifact set aggregate): integrity only

Each residency (and each probe) runs in a worker process of its own; a load starts it, an unload
kills it. A worker that dies on its own is reported as ResidencyUnloadFailed(still_resident=False,
WORKER_RESTART_RECONCILED), so the gateway takes the copy off its books and loads it again.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from pathlib import Path

from eventstore.store import EventStore, ExpectedVersion
from nodeagent.agent.artifact_cache import ArtifactCache
from nodeagent.agent.fetch_progress import FetchProgress
from nodeagent.agent.hardware import Accelerator, Hardware
from nodeagent.agent.invoke import InvokeServer
from nodeagent.agent.metrics import ResidentWorker
from nodeagent.agent.probing import run_probe
from nodeagent.agent.residency import LoadRequest, Residency, start_worker, stop_worker, verify_integrity
from nodeagent.agent.spare import SpareWorker
from nodeagent.agent.workers import Worker
from nodeagent.settings import DEFAULT_ARTIFACT_CACHE_BYTES, DEFAULT_CPU_THREADS
from streams import codes
from streams.codes import ServingError
from streams.envelope import Actor
from streams.events import Event
from streams.events import serving as s
from streams.events.control import (
    ArtifactSetVerificationFailed,
    ArtifactSetVerified,
    ProbeFailed,
)
from streams.messages import AnyJob, DrainJob, HealthJob, LoadJob, ProbeJob, UnloadJob, VerifyJob
from streams.subjects import Aggregate

# A health check's test inference is two short rows: far past this, the runtime is stuck.
HEALTH_CHECK_S = 30.0


@dataclass
class AgentState:
    node_id: str
    artifact_root: Path
    hardware: Hardware
    generation: int
    store: EventStore
    invokes: InvokeServer
    actor: Actor
    residencies: dict[str, Residency] = field(default_factory=dict)
    cpu_threads: int = DEFAULT_CPU_THREADS
    probing: dict[str, Worker] = field(default_factory=dict)  # by accelerator: a probe's worker
    cache_budget_bytes: int = DEFAULT_ARTIFACT_CACHE_BYTES
    spare: SpareWorker = field(default_factory=SpareWorker)  # the worker the next load takes
    cache: ArtifactCache = field(init=False)

    def __post_init__(self) -> None:
        self.cache = ArtifactCache(self.artifact_root, self.store.client, self.cache_budget_bytes)

    def held_sets(self) -> frozenset[str]:
        """The artifact sets loaded workers hold: never evicted from the cache."""
        return frozenset(r.artifact_set_id for r in self.residencies.values())

    def residencies_on(self, accelerator_id: str) -> list[str]:
        return sorted(d for d, r in self.residencies.items() if r.accelerator_id == accelerator_id)

    def resident_workers(self) -> list[ResidentWorker]:
        """The residencies as a scrape reads them (from the metrics server's thread: copied first)."""
        return [
            ResidentWorker(r.deployment_id, r.accelerator_id, r.capability, r.worker.pid, r.in_flight)
            for r in list(self.residencies.values())
        ]

    def workers_on(self, accelerator_id: str) -> list[tuple[str, int]]:
        """Each deployment resident on the accelerator and its worker's pid, in deployment order."""
        return sorted(
            (d, r.worker.pid) for d, r in self.residencies.items() if r.accelerator_id == accelerator_id
        )

    def pids_on(self, accelerator_id: str) -> list[int]:
        """The agent's and the workers' on the accelerator: whose memory its telemetry counts."""
        workers = [r.worker for r in self.residencies.values() if r.accelerator_id == accelerator_id]
        probe = self.probing.get(accelerator_id)
        return [os.getpid(), *(w.pid for w in workers), *([probe.pid] if probe else [])]

    async def close(self) -> None:
        """Kill every residency's worker (a shutdown: their invokes were answered first), and the
        spare."""
        for residency in list(self.residencies.values()):
            await residency.worker.kill()
        await self.spare.close()


class Operations:
    def __init__(self, state: AgentState) -> None:
        self.state = state

    async def run(self, job: AnyJob) -> None:
        match job:
            case LoadJob():
                await self.load(job)
            case UnloadJob():
                await self.unload(job)
            case HealthJob():
                await self.health(job)
            case DrainJob():
                await self.drain(job)
            case ProbeJob():
                await self.probe(job)
            case VerifyJob():
                await self.verify(job)

    async def fail(self, job: AnyJob, code: str, detail: str, deliveries: int = 0) -> None:
        """The job's own failure event, for a job refused or out of deliveries."""
        match job:
            case LoadJob():
                await self._record(job, self._load_failed(job, code, detail))
            case UnloadJob():
                await self._record(job, self._unload_failed(job, code, detail))
            case ProbeJob():
                failed = ProbeFailed(
                    candidate_id=job.candidate_id,
                    probe_id=job.probe_id,
                    node_id=job.node_id,
                    code=code,
                    detail=detail,
                )
                await self._append(Aggregate.CANDIDATE, job.candidate_id, failed, job.job_id)
            case VerifyJob():
                refused = ArtifactSetVerificationFailed(
                    artifact_set_id=job.artifact_set_id, node_id=job.node_id, code=code, detail=detail
                )
                await self._append(Aggregate.ARTIFACT_SET, job.artifact_set_id, refused, job.job_id)
            case _:
                failed_job = s.AgentJobFailed(
                    job_id=job.job_id,
                    op=str(type(job).__struct_config__.tag),
                    accelerator_id=job.accelerator_id,
                    deployment_id=job.deployment_id,
                    code=code,
                    detail=detail,
                    deliveries=deliveries,
                )
                await self._record(job, failed_job)

    # ---- load / unload ------------------------------------------------------------------------

    async def load(self, job: LoadJob) -> None:
        accelerator = self._accelerator(job)
        if accelerator is None:
            await self.fail(
                job, codes.NODE_OWNERSHIP_MISMATCH.code, f"no accelerator {job.accelerator_id} here"
            )
            return
        resident = self.state.residencies.get(job.deployment_id)
        if resident is not None and resident.accelerator_id != job.accelerator_id:
            # One copy per deployment on a node: reporting this one for the other device would put
            # it on the books twice (the gateway keeps the copy it has where it is).
            detail = f"{job.deployment_id} is already loaded on {resident.accelerator_id} on this node"
            await self._record(job, self._load_failed(job, codes.RESIDENCY_CONFLICT.code, detail))
            return
        if resident is not None:  # a redelivered or repeated load: report what is already held
            await self.state.invokes.start(resident)
            await self._record(job, self._loaded(job, resident))
            return
        await self._record(
            job,
            s.ResidencyLoading(
                load_id=job.load_id,
                accelerator_id=job.accelerator_id,
                deployment_id=job.deployment_id,
                generation=self.state.generation,
            ),
        )
        request = LoadRequest(
            job.deployment_id,
            job.artifact_set_id,
            job.artifact_root,
            job.manifest,
            job.capability,
            accelerator,
            job.max_batch_size,
            self.state.cpu_threads,
        )
        try:
            worker, measurement = await start_worker(
                self.state.cache,
                request,
                self.state.held_sets(),
                self._progress(job, job.artifact_set_id),
                self.state.spare,
            )
        except ServingError as error:
            await self._record(job, self._load_failed(job, error.code, error.message))
            return
        except Exception as error:  # an unforeseen fault is still this load's outcome, with a code
            detail = f"load failed: {type(error).__name__}"
            await self._record(job, self._load_failed(job, codes.RESIDENCY_LOAD_FAILED.code, detail))
            return
        residency = Residency(
            deployment_id=job.deployment_id,
            accelerator_id=job.accelerator_id,
            capability=job.capability,
            generation=self.state.generation,
            worker=worker,
            measurement=measurement,
            artifact_set_id=job.artifact_set_id,
        )
        self.state.residencies[job.deployment_id] = residency
        await self.state.invokes.start(residency)  # serving before anyone reads "loaded"
        await self._record(job, self._loaded(job, residency))
        # Its death is reported after its load, never before (the books would keep a dead copy);
        # `how` is set just before the worker looks for this hook: one of the two reports it.
        worker.on_exit = lambda _: self._lost(residency)
        if worker.how:
            await self._lost(residency)

    async def unload(self, job: UnloadJob) -> None:
        await self._record(
            job,
            s.ResidencyUnloading(
                accelerator_id=job.accelerator_id, deployment_id=job.deployment_id, reason=job.reason
            ),
        )
        residency = self.state.residencies.get(job.deployment_id)
        if residency is None:  # not held by this generation: it is already cold
            await self._record(job, self._unloaded(job, 0))
            return
        await self.state.invokes.stop(residency)
        del self.state.residencies[job.deployment_id]
        accelerator = self.state.hardware.accelerator(residency.accelerator_id)
        assert accelerator is not None  # it was loaded there
        reclaimed = await stop_worker(accelerator, residency.worker, residency.measurement)
        if reclaimed <= 0:  # as the reference: a failed unload; but the model is gone from here
            detail = f"unloaded, but memory did not go down ({reclaimed} bytes)"
            failed = self._unload_failed(
                job, codes.RESIDENCY_UNLOAD_FAILED.code, detail, still_resident=False
            )
            await self._record(job, failed)
            return
        await self._record(job, self._unloaded(job, reclaimed))

    # ---- health / drain -----------------------------------------------------------------------

    async def health(self, job: HealthJob) -> None:
        residency = self.state.residencies.get(job.deployment_id)
        process_ok = residency is None or residency.worker.alive  # the agent's, else its worker's
        runtime_ok = residency is not None and residency.worker.alive
        model_ok, detail = False, "not resident in this worker generation"
        if residency is not None:
            model_ok, detail = await _checked(residency)
        await self._record(
            job,
            s.ResidencyHealthChecked(
                accelerator_id=job.accelerator_id,
                deployment_id=job.deployment_id,
                generation=self.state.generation,
                job_id=job.job_id,
                process_ok=process_ok,
                runtime_ok=runtime_ok,
                model_ok=model_ok,
                code="" if runtime_ok and model_ok else codes.HEALTHCHECK_FAILED.code,
                detail=detail,
            ),
        )

    async def drain(self, job: DrainJob) -> None:
        residency = self.state.residencies.get(job.deployment_id)
        if residency is not None:
            await self.state.invokes.stop(residency)  # a later load job resumes serving
        drained = s.ResidencyDrained(
            accelerator_id=job.accelerator_id,
            deployment_id=job.deployment_id,
            generation=self.state.generation,
            job_id=job.job_id,
        )
        await self._record(job, drained)

    # ---- probe --------------------------------------------------------------------------------

    async def probe(self, job: ProbeJob) -> None:
        accelerator = self._accelerator(job)
        if accelerator is None:
            await self.fail(
                job, codes.NODE_OWNERSHIP_MISMATCH.code, f"no accelerator {job.accelerator_id} here"
            )
            return
        try:
            completed = await run_probe(
                job,
                accelerator,
                self.state.cache,
                self.state.cpu_threads,
                self.state.hardware.fingerprint,
                self.state.probing,
                self.state.held_sets(),
                self._progress(job, job.artifact_set_id),
                self.state.spare,
            )
        except ServingError as error:
            await self.fail(job, error.code, error.message)
            return
        except Exception as error:
            await self.fail(job, codes.RESIDENCY_LOAD_FAILED.code, f"load failed: {type(error).__name__}")
            return
        await self._append(Aggregate.CANDIDATE, job.candidate_id, completed, job.job_id)

    # ---- verify -------------------------------------------------------------------------------

    async def verify(self, job: VerifyJob) -> None:
        try:
            verified_bytes = await verify_integrity(
                self.state.cache, job.artifact_set_id, job.artifact_root, job.manifest, self.state.held_sets()
            )
        except ServingError as error:
            await self.fail(job, error.code, error.message)
            return
        verified = ArtifactSetVerified(
            artifact_set_id=job.artifact_set_id,
            node_id=job.node_id,
            manifest_sha256=job.manifest_sha256,
            verified_bytes=verified_bytes,
        )
        await self._append(Aggregate.ARTIFACT_SET, job.artifact_set_id, verified, job.job_id)

    # ---- helpers ------------------------------------------------------------------------------

    def _progress(self, job: AnyJob, artifact_set_id: str) -> FetchProgress:
        async def record(event: Event) -> None:
            await self._append(Aggregate.ARTIFACT_SET, artifact_set_id, event, job.job_id)

        return FetchProgress(artifact_set_id, self.state.node_id, job.job_id, record)

    def _accelerator(self, job: AnyJob) -> Accelerator | None:
        return self.state.hardware.accelerator(job.accelerator_id)

    def _loaded(self, job: LoadJob, residency: Residency) -> s.ResidencyLoaded:
        m = residency.measurement
        return s.ResidencyLoaded(
            load_id=job.load_id,
            accelerator_id=job.accelerator_id,
            deployment_id=job.deployment_id,
            generation=residency.generation,
            runtime=m.runtime,
            baseline_bytes=m.baseline_bytes,
            loaded_bytes=m.loaded_bytes,
            peak_bytes=m.peak_bytes,
            measured_bytes=m.measured_bytes,
            cold_load_ms=m.cold_load_ms,
        )

    @staticmethod
    def _load_failed(job: LoadJob, code: str, detail: str) -> s.ResidencyLoadFailed:
        return s.ResidencyLoadFailed(
            load_id=job.load_id,
            accelerator_id=job.accelerator_id,
            deployment_id=job.deployment_id,
            code=code,
            detail=detail,
        )

    @staticmethod
    def _unloaded(job: UnloadJob, reclaimed: int) -> s.ResidencyUnloaded:
        return s.ResidencyUnloaded(
            accelerator_id=job.accelerator_id, deployment_id=job.deployment_id, reclaimed_bytes=reclaimed
        )

    @staticmethod
    def _unload_failed(
        job: UnloadJob, code: str, detail: str, still_resident: bool = True
    ) -> s.ResidencyUnloadFailed:
        return s.ResidencyUnloadFailed(
            accelerator_id=job.accelerator_id,
            deployment_id=job.deployment_id,
            code=code,
            detail=detail,
            still_resident=still_resident,
        )

    async def _lost(self, residency: Residency) -> None:
        """A worker that died on its own (a crash, the OOM killer): its model is gone from this
        node. Take it off the books before its in-flight invokes hear why, so a retry loads it anew."""
        deployment = residency.deployment_id
        if residency.worker.stopping or self.state.residencies.get(deployment) is not residency:
            return  # killed on purpose, or already replaced
        del self.state.residencies[deployment]
        await self.state.invokes.stop_taking(deployment)
        gone = s.ResidencyUnloadFailed(
            accelerator_id=residency.accelerator_id,
            deployment_id=deployment,
            code=codes.WORKER_RESTART_RECONCILED.code,
            detail=f"its worker process died ({residency.worker.how}): the model is no longer loaded",
            still_resident=False,
        )
        await self._append(Aggregate.ACCELERATOR, residency.accelerator_id, gone, None)

    async def _record(self, job: AnyJob, event: Event) -> None:
        await self._append(Aggregate.ACCELERATOR, job.accelerator_id, event, job.job_id)

    async def _append(
        self, aggregate: Aggregate, aggregate_id: str, event: Event, job_id: str | None
    ) -> None:
        await self.state.store.append(
            aggregate, aggregate_id, [event], ExpectedVersion.ANY, actor=self.state.actor, causation_id=job_id
        )


async def _checked(residency: Residency) -> tuple[bool, str]:
    """The model's health: its fixed test inference, bounded in time. A runtime that hangs or
    crashes is reported unhealthy (so the gateway stops sending it work), never left to retry the
    job until its delivery limit while it holds up this node's other jobs."""
    try:
        async with asyncio.timeout(HEALTH_CHECK_S):
            await residency.worker.check()
    except ServingError as error:  # an engine fault in the worker comes as one, by its type
        return False, f"{error.code}: {error.message}"
    except TimeoutError:
        return False, f"the test inference did not finish within {HEALTH_CHECK_S:.0f} s"
    return True, ""
