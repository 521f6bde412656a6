"""Serving events: deployments and the accelerator aggregate, where all VRAM bookkeeping for one
GPU serialises (leases, residencies, evictions, pressure, placement rejections)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

import msgspec

from streams.events.base import Event
from streams.events.releases import RollbackPolicyChanged, RoutingWeightsChanged

__all__ = ["RollbackPolicyChanged", "RoutingWeightsChanged"]  # canary events, kept in releases.py

ResidencyPolicyKind = Literal["on_demand", "keep_warm", "always_warm"]
Channel = Literal["stable", "experiment", "lab"]
PressureLevel = Literal["NORMAL", "ELEVATED", "HIGH", "CRITICAL"]
PlacementKind = Literal["binpack", "spread"]

# ---- deployment ----------------------------------------------------------------------------


class ResourceEnvelope(msgspec.Struct, frozen=True):
    """Measured by a probe: what a model needs to load and to serve one request."""

    required_bytes: int
    peak_bytes: int
    per_request_bytes: int
    cold_load_ms: float


class EmbeddingSpace(msgspec.Struct, frozen=True):
    """Vectors are only comparable within one space: a change means reindex."""

    space_id: str
    dimension: int
    normalized: bool
    input_semantics: str  # e.g. "symmetric", "query/passage"
    truncatable_dimensions: tuple[int, ...] = ()


class ResidencyPolicy(msgspec.Struct, frozen=True):
    kind: ResidencyPolicyKind = "on_demand"
    keep_warm_ttl_s: float = 0.0


class Replicas(msgspec.Struct, frozen=True):
    """How many copies of a deployment: `min` kept resident (on distinct nodes where they fit)
    when it asks to stay resident (always-warm, or min > 1), up to `max` under queue pressure."""

    min: int = 1
    max: int = 1


class DeploymentCaps(msgspec.Struct, frozen=True):
    """At most `max_concurrency` requests of one deployment run at once across every gateway
    replica (0: no cap of its own), and at most `max_queue_depth` more wait for one of them; past
    that a request is refused QUEUE_FULL (gateway.serving.caps)."""

    max_concurrency: int = 0
    max_queue_depth: int = 64


STABLE_CAPS = DeploymentCaps()
EXPERIMENT_CAPS = DeploymentCaps(max_concurrency=1)  # an experiment runs one request at a time


class DeploymentPromoted(Event, frozen=True):
    deployment_id: str
    capability: str
    candidate_id: str
    approval_id: str
    artifact_set_id: str
    model_name: str
    channel: Channel
    envelope: ResourceEnvelope
    residency: ResidencyPolicy = ResidencyPolicy()
    embedding_space: EmbeddingSpace | None = None
    max_batch_size: int = 32
    probe_id: str = ""  # the probe that measured `envelope` ("" in events from before it was kept)
    # The manifest of the artifact set as approved: the only files this deployment loads ("" in
    # events from before it was kept: the catalogue binds the set's manifest at the promotion).
    manifest_sha256: str = ""
    replicas: Replicas = Replicas()
    placement: PlacementKind = "binpack"  # where new copies go: the tightest fit, or the most free memory


class ExperimentCreated(Event, frozen=True):
    deployment_id: str
    capability: str
    candidate_id: str
    artifact_set_id: str
    model_name: str
    route: str
    envelope: ResourceEnvelope
    embedding_space: EmbeddingSpace | None = None
    probe_id: str = ""  # the probe that measured `envelope`
    manifest_sha256: str = ""  # the artifact set's manifest as probed (as DeploymentPromoted's)


class ExperimentActivated(Event, frozen=True):
    deployment_id: str


class ExperimentDeactivated(Event, frozen=True):
    deployment_id: str
    reason: str = ""


class DeploymentDraining(Event, frozen=True):
    deployment_id: str
    reason: str = ""


class DeploymentDrained(Event, frozen=True):
    deployment_id: str


class ResidencyPolicyChanged(Event, frozen=True):
    deployment_id: str
    residency: ResidencyPolicy


class DeploymentScalingChanged(Event, frozen=True):
    deployment_id: str
    replicas: Replicas
    placement: PlacementKind


class DeploymentCapsChanged(Event, frozen=True):
    deployment_id: str
    caps: DeploymentCaps


# ---- accelerator (scheduling aggregate) ------------------------------------------------------


class LeaseGranted(Event, frozen=True):
    lease_id: str
    accelerator_id: str
    deployment_id: str
    request_id: str  # the first of `request_ids`
    client_id: str
    reserved_bytes: int
    expires_at: datetime
    decision_fingerprint: str
    # every request the lease serves (requests sharing one run: gateway.serving.coalescing);
    # empty in events written before it was added, where `request_id` is the only one
    request_ids: list[str] = msgspec.field(default_factory=list)
    # a standby lease's renewal only: when a request last ran under a slot of the lease it
    # replaces. Such requests append no lease of their own, so this is their resident's use on the
    # books (keep-warm TTLs, idle replicas and eviction order count it).
    used_at: datetime | None = None


class LeaseReleased(Event, frozen=True):
    lease_id: str
    accelerator_id: str
    outcome: Literal["completed", "failed", "cancelled"]


class LeaseExpired(Event, frozen=True):
    lease_id: str
    accelerator_id: str


class ResidencyLoadRequested(Event, frozen=True):
    load_id: str
    accelerator_id: str
    node_id: str
    deployment_id: str
    required_bytes: int
    reason: str = ""  # "request", "always_warm", "probe"


class ResidencyLoading(Event, frozen=True):
    load_id: str
    accelerator_id: str
    deployment_id: str
    generation: int


class ResidencyLoaded(Event, frozen=True):
    load_id: str
    accelerator_id: str
    deployment_id: str
    generation: int
    runtime: str
    baseline_bytes: int
    loaded_bytes: int
    peak_bytes: int
    measured_bytes: int  # loaded - baseline: what the residency holds
    cold_load_ms: float
    engine_cache_hit: bool = False


class ResidencyLoadFailed(Event, frozen=True):
    load_id: str
    accelerator_id: str
    deployment_id: str
    code: str
    detail: str


class ResidencyUnloading(Event, frozen=True):
    accelerator_id: str
    deployment_id: str
    reason: (
        str  # "eviction", "keep_warm_ttl", "artifact_set_unservable", "over_capacity", "operator", "drain"
    )


class ResidencyUnloaded(Event, frozen=True):
    accelerator_id: str
    deployment_id: str
    reclaimed_bytes: int


class ResidencyUnloadFailed(Event, frozen=True):
    accelerator_id: str
    deployment_id: str
    code: str
    detail: str
    # False: the agent no longer serves the model, but the memory it held was not seen to come
    # back (it stays visible to the scheduler as observed memory). True: the model is still there.
    still_resident: bool = True


class ResidencyReconciled(Event, frozen=True):
    """After a worker restart: what the new generation really holds; the rest is cold."""

    accelerator_id: str
    generation: int
    held: tuple[str, ...]
    dropped: tuple[str, ...]


class EvictionPlanned(Event, frozen=True):
    eviction_id: str
    accelerator_id: str
    victims: tuple[str, ...]  # deployment ids
    for_deployment_id: str
    required_bytes: int
    decision_fingerprint: str
    # Why: "eviction" makes room for `for_deployment_id`; "operator" and "drain" are an operator's
    # unload of the one victim ("" for whom, nothing required), decided against its leases; the
    # upkeep's own are "keep_warm_ttl", "artifact_set_unservable" and "over_capacity" (books a
    # load's measurement put past capacity).
    reason: str = "eviction"


class EvictionCompleted(Event, frozen=True):
    eviction_id: str
    accelerator_id: str
    reclaimed_bytes: int
    # "failed": no victim gave its memory back (every unload failed or was never sent)
    outcome: Literal["completed", "failed"] = "completed"


class PressureChanged(Event, frozen=True):
    accelerator_id: str
    previous: PressureLevel
    current: PressureLevel
    utilization: float


class PlacementRejected(Event, frozen=True):
    """A placement refused or queued, on the chosen (or closest) accelerator. Identical ones (same
    deployment, verdict and first reason) within `window_s` of `first_at` are one event with their
    `count`; `request_id` and `decision_fingerprint` are the first's (gateway.serving.refusals)."""

    accelerator_id: str
    request_id: str
    deployment_id: str
    verdict: str
    reason_codes: tuple[str, ...]
    decision_fingerprint: str
    count: int = 1
    first_at: datetime | None = None
    window_s: float = 0.0
    dry_run: bool = False  # planned by POST /admin/v1/scheduler/dry-run: nothing was asked to run
    required_bytes: int = 0
    schedulable_bytes: int | None = None  # the accelerator's headroom before the decision


class PlacementDryRun(Event, frozen=True):
    """A dry run (POST /admin/v1/scheduler/dry-run) whose plan would admit: where, what it would
    evict and the headroom around it; nothing was asked to run. A plan that would refuse or queue
    is a `PlacementRejected` marked `dry_run`. Identical ones within a window are one event with
    their `count`, as refusals are (gateway.serving.refusals)."""

    accelerator_id: str
    deployment_id: str
    verdict: str  # ADMIT | ADMIT_AFTER_EVICTION
    reason_codes: tuple[str, ...]
    decision_fingerprint: str
    required_bytes: int
    schedulable_bytes: int | None = None  # the accelerator's headroom before the decision
    headroom_after_bytes: int | None = None
    evictions: tuple[str, ...] = ()  # deployments it would unload first
    cold_load: bool = False
    count: int = 1
    first_at: datetime | None = None
    window_s: float = 0.0


class CoResidencyProven(Event, frozen=True):
    """Two residents measured together in one worker generation."""

    accelerator_id: str
    deployment_a: str
    deployment_b: str
    generation: int
    observed_bytes: int
    state: Literal["PROVEN_SAFE", "PROVEN_UNSAFE"]


class ResidencyHealthChecked(Event, frozen=True):
    """Layered health of one residency, measured by the agent on a health job."""

    accelerator_id: str
    deployment_id: str
    generation: int
    job_id: str
    process_ok: bool
    runtime_ok: bool
    model_ok: bool
    code: str = ""  # HEALTHCHECK_FAILED (or a more specific code) when a layer is not ok
    detail: str = ""


class ResidencyDrained(Event, frozen=True):
    """The agent stopped taking invokes for a residency and its in-flight invokes finished."""

    accelerator_id: str
    deployment_id: str
    generation: int
    job_id: str


class AgentJobFailed(Event, frozen=True):
    """A control job that ended without its own outcome event: refused (another node's job) or
    exhausted its deliveries (its agent died or stalled on every attempt)."""

    job_id: str
    op: str
    accelerator_id: str
    deployment_id: str
    code: str
    detail: str
    deliveries: int = 0
