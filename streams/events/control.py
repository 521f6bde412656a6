"""Control-plane events: contracts, artifact sets, nodes, candidates/probes, approvals, projects,
clients and scheduler policy. Aggregate ids are the first field of each event."""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar, Literal

import msgspec

from streams.events.base import Event

# ---- capability contract -------------------------------------------------------------------


class CapabilityContractRegistered(Event, frozen=True):
    """A contract is immutable once published: a change is a new version."""

    capability: str  # e.g. "rag.embedding@1"
    input_schema: dict[str, object]
    output_schema: dict[str, object]
    upgrade_class: str  # "compatible" | "reindex" | "breaking"
    limits: dict[str, int]
    definition_sha256: str = ""  # of the fields above, canonical JSON (gateway.contracts)


# ---- artifact set --------------------------------------------------------------------------

ArtifactFormat = Literal["onnx", "tokenizer-json", "json-config", "safetensors", "pickle", "text", "other"]


class ArtifactFile(msgspec.Struct, frozen=True):
    path: str  # relative to the artifact set's root
    sha256: str
    size: int
    format: ArtifactFormat


class ArtifactSetRegistered(Event, frozen=True):
    artifact_set_id: str
    name: str
    capability: str
    node_id: str
    root: str  # folder under the node's artifact root
    files: tuple[ArtifactFile, ...]
    risk_flags: tuple[str, ...] = ()  # e.g. "pickle_present", "remote_code_required"
    manifest_sha256: str = ""
    source: str = ""


class ArtifactSetVerified(Event, frozen=True):
    artifact_set_id: str
    node_id: str
    manifest_sha256: str
    verified_bytes: int


class ArtifactSetVerificationFailed(Event, frozen=True):
    artifact_set_id: str
    node_id: str
    code: str  # ARTIFACT_NOT_VERIFIED, ARTIFACT_PATH_INVALID, PICKLE_PRESENT, ...
    detail: str


class ArtifactSetFetchProgressed(Event, frozen=True):
    """A node fetching the set from the artifact bucket into its cache for a job: at the start, at
    each quarter of its bytes, and once whole (a few per fetch, so the log is not flooded)."""

    artifact_set_id: str
    node_id: str
    job_id: str
    fetched_bytes: int
    total_bytes: int


class ArtifactSetQuarantined(Event, frozen=True):
    artifact_set_id: str
    reason: str


# ---- node ----------------------------------------------------------------------------------


class AcceleratorSpec(msgspec.Struct, frozen=True):
    accelerator_id: str
    kind: Literal["gpu", "cpu"]
    name: str
    total_bytes: int
    compute_capability: str = ""  # "9.0" for Hopper; empty for CPU devices
    uuid: str = ""


class NodeRegistered(Event, frozen=True):
    node_id: str
    hostname: str
    hardware_fingerprint: str
    accelerators: tuple[AcceleratorSpec, ...]
    protocol_capabilities: tuple[str, ...]  # e.g. "deployment.load.v1"
    runtimes: tuple[str, ...]  # e.g. "onnxruntime-cpu", "tensorrt"
    agent_version: str


class NodeEnabled(Event, frozen=True):
    node_id: str


class NodeDisabled(Event, frozen=True):
    node_id: str
    reason: str


class NodeProductionEligibilityChanged(Event, frozen=True):
    node_id: str
    eligible: bool
    reason: str = ""


class NodeDecommissioned(Event, frozen=True):
    node_id: str
    reason: str = ""


class NodeLost(Event, frozen=True):
    """A gateway declared the node's worker generation gone: its telemetry stopped (or it said it
    stopped). Every accelerator of it is then reconciled to cold (`ResidencyReconciled`), which
    ends its leases and residencies; its next `WorkerStarted` brings it back."""

    node_id: str
    generation: int
    last_seen_at: datetime | None  # its last telemetry sample's time (None: none was seen)
    reason: str


class HeldResidency(msgspec.Struct, frozen=True):
    deployment_id: str
    accelerator_id: str
    measured_bytes: int


class WorkerStarted(Event, frozen=True):
    """A new agent generation: residencies not listed here are reconciled to cold."""

    node_id: str
    generation: int
    residencies: tuple[HeldResidency, ...] = ()


# ---- candidate / probe ---------------------------------------------------------------------


class CandidateRegistered(Event, frozen=True):
    candidate_id: str
    capability: str
    artifact_set_id: str
    runtime_profile: dict[str, str]  # runtime, precision, max batch, max sequence ...
    deployment_config: dict[str, str]


class ProbeRequested(Event, frozen=True):
    candidate_id: str
    probe_id: str
    node_id: str
    accelerator_id: str
    lab_approval_id: str
    manifest_sha256: str = ""  # the artifact set's manifest the probe job loads ("" before it was kept)


class HealthLayers(msgspec.Struct, frozen=True):
    process: bool
    runtime: bool
    model: bool
    detail: str = ""


def loaded_model_bytes(baseline_bytes: int, loaded_bytes: int, weights_bytes: int) -> int:
    """The memory a loaded model holds: what loading added to its memory domain, and at the least
    its weights. Process RSS (a CPU device) is shared and coarse: the allocator may reuse pages
    freed by earlier work, so a model can load without RSS growing; it still holds its weights."""
    return max(loaded_bytes - baseline_bytes, weights_bytes)


class ProbeCompleted(Event, frozen=True):
    candidate_id: str
    probe_id: str
    node_id: str
    accelerator_id: str
    hardware_fingerprint: str
    runtime: str
    health: HealthLayers
    output_valid: bool
    baseline_bytes: int
    loaded_bytes: int
    peak_bytes: int
    cold_load_ms: float
    inference_ms: float
    unload_reclaimed_bytes: int
    # What the test inference produced, for the gateway to hold against the declared profile:
    # an embedding's vector length and whether every vector had unit norm (0: not measured, as
    # for a reranker or a probe recorded before the agent measured it).
    output_dimension: int = 0
    output_normalized: bool = False
    manifest_sha256: str = ""  # the manifest of the probe job this agent ran ("" before it was kept)
    weights_bytes: int = 0  # the loaded model files' size (0 in probes recorded before it was kept)

    @property
    def measured_bytes(self) -> int:
        return loaded_model_bytes(self.baseline_bytes, self.loaded_bytes, self.weights_bytes)


class ProbeFailed(Event, frozen=True):
    candidate_id: str
    probe_id: str
    node_id: str
    code: str
    detail: str


class CandidateLabReady(Event, frozen=True):
    candidate_id: str
    probe_id: str


# ---- approval ------------------------------------------------------------------------------


class LabExecutionApproved(Event, frozen=True):
    approval_id: str
    candidate_id: str
    node_ids: tuple[str, ...]
    expires_at: datetime


class ProductionApproved(Event, frozen=True):
    """Bound to a fingerprint over every fact it rests on; any change makes it stale."""

    approval_id: str
    candidate_id: str
    evidence_fingerprint: str
    evidence: dict[str, str]
    # Who approved (the operator the admin API named) and why; outside the fingerprint, as the
    # reference keeps them. Approvals recorded before these were required have neither.
    approved_by: str = ""
    reason: str = ""


class ApprovalRevoked(Event, frozen=True):
    approval_id: str
    reason: str


class ApprovalMarkedStale(Event, frozen=True):
    approval_id: str
    changed_facts: tuple[str, ...]


# ---- service client ------------------------------------------------------------------------


class ClientCreated(Event, frozen=True):
    """v2 renamed v1's `rpm` / `concurrency` (see streams.events.upcasters)."""

    schema_version: ClassVar[int] = 2

    client_id: str
    name: str
    scopes: tuple[str, ...]  # "capability@version"
    requests_per_minute: int
    max_concurrency: int
    priority: int = 0
    project_id: str | None = None
    # What the client is for, as its owner said (the reference's fields; "" before they were kept):
    # the environment it integrates from (e.g. "production", "staging") and a line of purpose.
    integration_environment: str = ""
    purpose: str = ""


class ClientLimitsChanged(Event, frozen=True):
    client_id: str
    scopes: tuple[str, ...]
    requests_per_minute: int
    max_concurrency: int
    priority: int = 0


class CredentialIssued(Event, frozen=True):
    """Only the key's sha256 is stored; the key itself is shown once to the operator."""

    client_id: str
    credential_id: str
    key_sha256: str
    key_prefix: str  # first characters, to recognise a key in a list
    expires_at: datetime | None = None


class CredentialRotated(Event, frozen=True):
    client_id: str
    old_credential_id: str
    new_credential_id: str
    key_sha256: str
    key_prefix: str
    grace_until: datetime | None = None  # old key still valid until then
    expires_at: datetime | None = None


class CredentialRevoked(Event, frozen=True):
    client_id: str
    credential_id: str
    reason: str = ""


class ClientDisabled(Event, frozen=True):
    client_id: str
    reason: str = ""


class ClientEnabled(Event, frozen=True):
    client_id: str


# ---- project -------------------------------------------------------------------------------


class ProjectRegistered(Event, frozen=True):
    project_id: str
    name: str
    owner: str = ""


class ProjectBoundToChannel(Event, frozen=True):
    project_id: str
    capability: str
    channel: str  # "stable" or an experiment route


class ClientBoundToProject(Event, frozen=True):
    project_id: str
    client_id: str


class ProjectFitEvidenceRecorded(Event, frozen=True):
    project_id: str
    capability: str
    evidence: dict[str, str]
    passed: bool
    failed_gates: tuple[str, ...] = ()


# ---- scheduler policy ----------------------------------------------------------------------


class SchedulerPolicyRevised(Event, frozen=True):
    revision: int
    settings: dict[str, float]  # names of gateway.scheduler.policy.SchedulerPolicy fields
