"""The evidence fingerprint of a production approval: sha256 over the canonical msgspec encoding
of every fact the approval rests on (reference §5.2). An approval is stale as soon as the
fingerprint recomputed from today's facts differs from the approved one.
"""

from __future__ import annotations

import hashlib

import msgspec

from gateway.promotion.model import ArtifactSetState, CandidateState, NodeState, ProbeRecord

_encoder = msgspec.json.Encoder(order="sorted")


class FileFact(msgspec.Struct, frozen=True, array_like=True):
    path: str
    sha256: str
    format: str


class Evidence(msgspec.Struct, frozen=True, kw_only=True):
    """Every fact behind a production approval. Field names are the names of changed facts."""

    candidate: str
    contract: str
    artifact_set: str
    artifact_status: str
    artifact_files: tuple[FileFact, ...]
    risk_flags: tuple[str, ...]
    runtime_profile: dict[str, str]
    runtime_profile_fingerprint: str
    node: str
    node_hardware_fingerprint: str
    probe: str
    probe_environment: dict[str, str]
    probe_measurements: dict[str, float]
    compatibility: str
    deployment_config: dict[str, str]
    supply_chain: dict[str, str]


def canonical(value: object) -> bytes:
    return _encoder.encode(value)


def digest(value: object) -> str:
    return hashlib.sha256(canonical(value)).hexdigest()


def gather(
    candidate: CandidateState,
    artifacts: ArtifactSetState | None,
    node: NodeState | None,
    probe: ProbeRecord | None,
    compatibility: str,
    review: str,
) -> Evidence:
    result = probe.result if probe else None
    return Evidence(
        candidate=candidate.candidate_id,
        contract=candidate.capability,
        artifact_set=candidate.artifact_set_id,
        artifact_status=artifacts.status if artifacts else "missing",
        artifact_files=tuple(
            FileFact(f.path, f.sha256.lower(), f.format)
            for f in sorted(artifacts.files if artifacts else (), key=lambda f: f.path)
        ),
        risk_flags=tuple(sorted(set(artifacts.risk_flags))) if artifacts else (),
        runtime_profile=dict(candidate.runtime_profile),
        runtime_profile_fingerprint=digest(candidate.runtime_profile),
        node=node.node_id if node else "",
        node_hardware_fingerprint=node.hardware_fingerprint if node else "",
        probe=probe.probe_id if probe else "",
        probe_environment=_probe_environment(probe),
        probe_measurements={
            "baseline_bytes": float(result.baseline_bytes),
            "loaded_bytes": float(result.loaded_bytes),
            "peak_bytes": float(result.peak_bytes),
            "cold_load_ms": result.cold_load_ms,
            "unload_reclaimed_bytes": float(result.unload_reclaimed_bytes),
        }
        if result
        else {},
        compatibility=compatibility,
        deployment_config=dict(candidate.deployment_config),
        supply_chain={
            "source": artifacts.source if artifacts else "",
            "manifest_sha256": artifacts.manifest_sha256 if artifacts else "",
            "review": review,
        },
    )


def _probe_environment(probe: ProbeRecord | None) -> dict[str, str]:
    """What the probe ran on, and the manifest of the files it loaded. A probe recorded before
    probes kept their manifest has none: leaving the key out keeps the facts (and so the
    fingerprint) of approvals granted on such probes as they were approved."""
    result = probe.result if probe else None
    if probe is None or result is None:
        return {"status": probe.status if probe else "missing"}
    environment = {
        "runtime": result.runtime,
        "hardware_fingerprint": result.hardware_fingerprint,
        "accelerator": result.accelerator_id,
        "status": probe.status,
    }
    if probe.manifest_sha256:
        environment["manifest_sha256"] = probe.manifest_sha256
    return environment


def facts_of(evidence: Evidence) -> dict[str, str]:
    """Each fact as canonical JSON: what `ProductionApproved.evidence` records."""
    return {name: canonical(value).decode() for name, value in msgspec.structs.asdict(evidence).items()}


def fingerprint(evidence: Evidence) -> str:
    return digest(facts_of(evidence))


def changed_facts(approved: dict[str, str], current: Evidence) -> tuple[str, ...]:
    now = facts_of(current)
    return tuple(sorted(k for k in now.keys() | approved.keys() if approved.get(k) != now.get(k)))


def approval_id_for(evidence_fingerprint: str) -> str:
    """Approving the same facts twice names the same approval."""
    return f"pa-{evidence_fingerprint[:24]}"
