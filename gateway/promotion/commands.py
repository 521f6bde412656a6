"""Commands of the promotion pipeline: what an operator asks, before it is decided."""

from __future__ import annotations

from datetime import datetime

import msgspec

from gateway.promotion.evidence import Evidence
from gateway.promotion.gates import GateFailure
from gateway.promotion.model import ApprovalState
from streams.events import control as c
from streams.events import serving as s

# ---- artifact set ---------------------------------------------------------------------------


class RegisterArtifactSet(msgspec.Struct, frozen=True):
    registration: c.ArtifactSetRegistered


class QuarantineArtifactSet(msgspec.Struct, frozen=True):
    artifact_set_id: str
    reason: str


ArtifactCommand = RegisterArtifactSet | QuarantineArtifactSet

# ---- node -----------------------------------------------------------------------------------


class SetNodeEnabled(msgspec.Struct, frozen=True):
    node_id: str
    enabled: bool
    reason: str = ""


class SetNodeEligibility(msgspec.Struct, frozen=True):
    node_id: str
    eligible: bool
    reason: str = ""


class DecommissionNode(msgspec.Struct, frozen=True):
    node_id: str
    reason: str = ""


NodeCommand = SetNodeEnabled | SetNodeEligibility | DecommissionNode

# ---- candidate ------------------------------------------------------------------------------


class CreateCandidate(msgspec.Struct, frozen=True):
    candidate_id: str
    capability: str
    artifact_set_id: str
    runtime_profile: dict[str, str]
    deployment_config: dict[str, str]
    artifact_capability: str | None  # None: the artifact set is unknown
    artifact_quarantined: bool = False


class RequestProbe(msgspec.Struct, frozen=True):
    probe_id: str
    node_id: str
    accelerator_id: str
    lab_approval: ApprovalState | None
    lab_approval_id: str
    artifact_quarantined: bool = False
    manifest_sha256: str = ""  # the artifact set's manifest the probe job is built from


class MarkLabReady(msgspec.Struct, frozen=True):
    probe_id: str


CandidateCommand = CreateCandidate | RequestProbe | MarkLabReady

# ---- approval -------------------------------------------------------------------------------


class ApproveLabExecution(msgspec.Struct, frozen=True):
    approval_id: str
    candidate_id: str
    candidate_known: bool
    node_ids: tuple[str, ...]
    expires_at: datetime


class ApproveProduction(msgspec.Struct, frozen=True):
    candidate_id: str
    evidence: Evidence  # its supply_chain["review"] is the operator's supply-chain review
    failures: tuple[GateFailure, ...]
    approved_by: str
    reason: str


class RevokeApproval(msgspec.Struct, frozen=True):
    approval_id: str
    reason: str


class MarkApprovalStale(msgspec.Struct, frozen=True):
    approval_id: str
    current: Evidence


ApprovalCommand = ApproveLabExecution | ApproveProduction | RevokeApproval | MarkApprovalStale

# ---- deployment -----------------------------------------------------------------------------


class DrainDeployment(msgspec.Struct, frozen=True):
    deployment_id: str
    active_requests: int
    reason: str = ""


class CompleteDrain(msgspec.Struct, frozen=True):
    deployment_id: str


class ChangeResidency(msgspec.Struct, frozen=True):
    deployment_id: str
    residency: s.ResidencyPolicy


class ChangeScaling(msgspec.Struct, frozen=True):
    deployment_id: str
    replicas: s.Replicas
    placement: s.PlacementKind


class SetExperimentActive(msgspec.Struct, frozen=True):
    deployment_id: str
    active: bool
    reason: str = ""


DeploymentCommand = DrainDeployment | CompleteDrain | ChangeResidency | ChangeScaling | SetExperimentActive
