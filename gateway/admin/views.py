"""How admin responses show the promotion states (derived fields such as `status` included)."""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.deployments.model import DeploymentState
from gateway.promotion.model import ApprovalState, ArtifactSetState, CandidateState, ProbeRecord
from gateway.promotion.profile import output_mismatch


def artifact_set(state: ArtifactSetState) -> dict[str, Any]:
    out: dict[str, Any] = msgspec.to_builtins(state)
    out["status"] = state.status
    out["verified"] = state.verified
    out["total_bytes"] = sum(f.size for f in state.files)
    return out


def probe(record: ProbeRecord, candidate: CandidateState) -> dict[str, Any]:
    out: dict[str, Any] = msgspec.to_builtins(record)
    out["complete_evidence"] = record.complete_evidence
    # Why the measured output is not the declared profile ('' when it is, or nothing was measured).
    result = record.result
    out["output_mismatch"] = (
        output_mismatch(candidate.capability, candidate.runtime_profile, result) if result else ""
    )
    return out


def candidate(state: CandidateState) -> dict[str, Any]:
    out: dict[str, Any] = msgspec.to_builtins(state)
    out["status"] = state.status
    out["probes"] = [probe(p, state) for p in state.probes.values()]
    return out


def approval(state: ApprovalState) -> dict[str, Any]:
    out: dict[str, Any] = msgspec.to_builtins(state)
    out["status"] = state.status
    return out


def deployment(state: DeploymentState, **extra: object) -> dict[str, Any]:
    out: dict[str, Any] = msgspec.to_builtins(state)
    out["status"] = state.status
    out.update(extra)
    return out
