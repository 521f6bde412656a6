"""The promotion pipeline's aggregate states, folded from their events (see `evolve`).

Each state is a frozen value; `seq` fields are stream sequences, which order facts across
aggregates (a probe taken before its artifact set was re-registered is no longer current).
"""

from __future__ import annotations

from datetime import datetime

import msgspec

from streams.events import control as c

# What a node must advertise to hold a production deployment (reference §5.1, gate 6).
SERVING_PROTOCOLS = (
    "deployment.drain.v1",
    "deployment.health.v1",
    "deployment.invoke.v1",
    "deployment.load.v1",
    "deployment.unload.v1",
)
# Runtimes that execute local files only (no hub downloads, no remote code): gate 12.
OFFLINE_LOCAL_RUNTIMES = frozenset(
    {"onnxruntime-cpu", "onnxruntime-gpu", "tensorrt", "ctranslate2-cpu", "ctranslate2-cuda"}
)
# Files a runtime never receives: their presence in a set is judged by the production gates.
_NEVER_LOADED_SUFFIXES = (".py", ".pyc")


class ArtifactSetState(msgspec.Struct, frozen=True, kw_only=True):
    artifact_set_id: str
    name: str
    capability: str
    node_id: str
    root: str
    files: tuple[c.ArtifactFile, ...]
    risk_flags: tuple[str, ...]
    manifest_sha256: str
    source: str
    registered_seq: int
    verified_manifest: str = ""  # the manifest the node's agent last verified
    verified_bytes: int = 0
    failure_code: str = ""
    failure_detail: str = ""
    quarantined: bool = False
    quarantine_reason: str = ""

    @property
    def verified(self) -> bool:
        return bool(self.manifest_sha256) and self.verified_manifest == self.manifest_sha256

    @property
    def status(self) -> str:
        if self.quarantined:
            return "quarantined"
        if self.verified:
            return "verified"
        return "verification_failed" if self.failure_code else "registered"

    def serving_files(self) -> tuple[c.ArtifactFile, ...]:
        """What a runtime loads: everything but pickles and Python (which only a loader would run)."""
        return tuple(
            f for f in self.files if f.format != "pickle" and not f.path.endswith(_NEVER_LOADED_SUFFIXES)
        )


class NodeState(msgspec.Struct, frozen=True, kw_only=True):
    node_id: str
    hardware_fingerprint: str
    accelerators: tuple[c.AcceleratorSpec, ...]
    protocol_capabilities: tuple[str, ...]
    runtimes: tuple[str, ...]
    registered_seq: int
    enabled: bool = True
    production_eligible: bool = True
    decommissioned: bool = False
    generation: int = 0

    def accelerator(self, accelerator_id: str) -> c.AcceleratorSpec | None:
        return next((a for a in self.accelerators if a.accelerator_id == accelerator_id), None)


class ProbeRecord(msgspec.Struct, frozen=True, kw_only=True):
    probe_id: str
    node_id: str
    accelerator_id: str
    lab_approval_id: str
    requested_seq: int
    manifest_sha256: str = ""  # the artifact set's manifest the probe loaded ("" in old events)
    status: str = "requested"  # requested | completed | failed
    result: c.ProbeCompleted | None = None
    finished_seq: int = 0
    failure_code: str = ""
    failure_detail: str = ""

    @property
    def complete_evidence(self) -> bool:
        """Layered health, valid output and reclaimed memory: what makes a candidate lab-ready."""
        r = self.result
        return (
            r is not None
            and r.health.process
            and r.health.runtime
            and r.health.model
            and r.output_valid
            and r.measured_bytes > 0
            and r.unload_reclaimed_bytes > 0
        )


class CandidateState(msgspec.Struct, frozen=True, kw_only=True):
    candidate_id: str
    capability: str
    artifact_set_id: str
    runtime_profile: dict[str, str]
    deployment_config: dict[str, str]
    probes: dict[str, ProbeRecord] = msgspec.field(default_factory=dict)
    lab_ready_probe: str = ""

    @property
    def status(self) -> str:
        return "lab_ready" if self.lab_ready_probe else "registered"

    def probe(self, probe_id: str) -> ProbeRecord | None:
        return self.probes.get(probe_id)


class ApprovalState(msgspec.Struct, frozen=True, kw_only=True):
    approval_id: str
    kind: str  # "lab_execution" | "production"
    candidate_id: str
    node_ids: tuple[str, ...] = ()
    expires_at: datetime | None = None
    evidence_fingerprint: str = ""
    evidence: dict[str, str] = msgspec.field(default_factory=dict)
    approved_by: str = ""  # a production approval's approver and reason ("" before they were recorded)
    reason: str = ""
    revoked: bool = False
    revoke_reason: str = ""
    stale: bool = False
    stale_facts: tuple[str, ...] = ()

    @property
    def status(self) -> str:
        return "revoked" if self.revoked else "stale" if self.stale else "approved"

    def usable(self, now: datetime) -> bool:
        expired = self.expires_at is not None and self.expires_at <= now
        return self.status == "approved" and not expired


class ProjectState(msgspec.Struct, frozen=True, kw_only=True):
    project_id: str
    name: str
    owner: str = ""
    channels: dict[str, str] = msgspec.field(default_factory=dict)  # capability -> channel
    clients: tuple[str, ...] = ()
    fit: dict[str, c.ProjectFitEvidenceRecorded] = msgspec.field(default_factory=dict)
