"""Work and reply messages between the gateway and node agents.

Control jobs travel on MF_WORK (`mf.job.<node>.<deployment>.<op>`) and must not be lost. Invokes
travel by core NATS request-reply on `mf.invoke.<node>.<deployment>`, so content is never stored.
"""

from __future__ import annotations

import msgspec


class Job(msgspec.Struct, frozen=True, kw_only=True, tag=True, tag_field="op"):
    job_id: str
    node_id: str
    deployment_id: str
    accelerator_id: str
    requested_by: str = ""  # actor, for the events the job produces


class LoadJob(Job, frozen=True, tag="load"):
    load_id: str
    artifact_set_id: str
    capability: str
    artifact_root: str  # the artifact set's folder under the node's artifact root
    manifest: list[dict[str, object]]  # ArtifactFile records
    max_batch_size: int = 32


class UnloadJob(Job, frozen=True, tag="unload"):
    reason: str = "operator"


class HealthJob(Job, frozen=True, tag="health"):
    pass


class DrainJob(Job, frozen=True, tag="drain"):
    pass


class ProbeJob(Job, frozen=True, tag="probe"):
    probe_id: str
    candidate_id: str
    artifact_set_id: str
    capability: str
    artifact_root: str
    manifest: list[dict[str, object]]
    manifest_sha256: str = ""  # the artifact set's whole manifest that `manifest` was taken from


class VerifyJob(Job, frozen=True, tag="verify"):
    """Check every file of an artifact set against its manifest (size, sha256, confinement) without
    loading anything; risky files are reported by the production gates, not refused here.
    `deployment_id` names the verification (subjects need one)."""

    artifact_set_id: str
    artifact_root: str
    manifest: list[dict[str, object]]
    manifest_sha256: str


AnyJob = LoadJob | UnloadJob | HealthJob | DrainJob | ProbeJob | VerifyJob


class InvokeRequest(msgspec.Struct, frozen=True, kw_only=True):
    request_id: str
    capability: str
    deployment_id: str
    deadline_unix_ms: int
    payload: msgspec.Raw  # the contract's input, JSON-encoded once by the gateway
    # An embedding request's `input_type` ("query" | "document"; "" when not given): the model's
    # serving config may embed the two differently (`input_type_prefixes`). Outside the contract's
    # input, whose definition is immutable per version.
    input_type: str = ""


class WorkerTimings(msgspec.Struct, frozen=True, kw_only=True):
    queue_ms: float = 0.0
    preprocess_ms: float = 0.0
    inference_ms: float = 0.0
    serialize_ms: float = 0.0
    batch_size: int = 1


class InvokeReply(msgspec.Struct, frozen=True, kw_only=True):
    ok: bool
    # The contract's output, JSON; `null` on failure. (msgspec cannot decode `Raw | None`: a Raw
    # holding `null` is how "no result" travels.)
    result: msgspec.Raw = msgspec.Raw(b"null")
    code: str = ""
    message: str = ""
    timings: WorkerTimings = WorkerTimings()


class WorkerMemory(msgspec.Struct, frozen=True):
    """What one resident deployment's worker process holds on the accelerator: its RSS on the CPU
    device, its NVML per-process figure on a GPU."""

    deployment_id: str
    bytes: int


class AcceleratorTelemetry(msgspec.Struct, frozen=True, kw_only=True):
    """One accelerator's memory observation and the agent's liveness, on `mf.tel.<node>.<accelerator>`.

    MF_TELEMETRY keeps the last value per subject; a node whose last observation is older than a
    few intervals is stale and ineligible. `healthy=False` is sent when the agent stops cleanly.
    """

    node_id: str
    accelerator_id: str
    generation: int
    total_bytes: int
    used_bytes: int  # whole device (GPU) or this process's RSS (CPU device)
    process_bytes: int  # this agent process's share of used_bytes
    observed_at_unix_ms: int
    residencies: list[str]  # deployment ids resident on this accelerator
    healthy: bool
    interval_s: float = 0.0  # the publishing interval, so a reader can judge staleness
    # The artifact sets this node holds (fetched into its cache, or found in its artifact root),
    # sorted: placement prefers a node that need not fetch a set first.
    cached_sets: list[str] = []
    # Each resident's worker, where the device can tell one process's memory; an unloaded
    # deployment's worker is gone, and so is its entry.
    workers: list[WorkerMemory] = []
    # How often the agent's NATS connection has dropped in this generation. A rise tells a gateway
    # that an invoke it sent before may have been lost with the server the agent was on.
    reconnects: int = 0


class QueueDepth(msgspec.Struct, frozen=True, kw_only=True):
    """One gateway replica's requests waiting for capacity, announced on `mf.queue.<gateway>`;
    it counts for `valid_for_ms` after it is heard (the replica announces again before then while
    it waits). A duration, not a time: replicas' clocks need not agree."""

    gateway_id: str
    depth: int
    valid_for_ms: int
