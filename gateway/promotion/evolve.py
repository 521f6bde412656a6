"""Folds: `evolve_<aggregate>(state, event, seq) -> state`, and `fold(...)` over recorded events.

Pure. Events of other aggregates, and unknown ones, leave a state as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

import msgspec

from eventstore.records import RecordedEvent
from gateway.promotion.model import (
    ApprovalState,
    ArtifactSetState,
    CandidateState,
    NodeState,
    ProbeRecord,
    ProjectState,
)
from streams.codec import UnknownEvent
from streams.events import Event
from streams.events import control as c

S = TypeVar("S")
_replace = msgspec.structs.replace


def evolve_artifact_set(state: ArtifactSetState | None, event: Event, seq: int) -> ArtifactSetState | None:
    match event:
        case c.ArtifactSetRegistered():
            # A re-registration (changed files) starts over: nothing about the new files is verified.
            return ArtifactSetState(
                artifact_set_id=event.artifact_set_id,
                name=event.name,
                capability=event.capability,
                node_id=event.node_id,
                root=event.root,
                files=event.files,
                risk_flags=tuple(sorted(set(event.risk_flags))),
                manifest_sha256=event.manifest_sha256,
                source=event.source,
                registered_seq=seq,
                quarantined=state.quarantined if state else False,
                quarantine_reason=state.quarantine_reason if state else "",
            )
        case c.ArtifactSetVerified() if state is not None:
            return _replace(
                state,
                verified_manifest=event.manifest_sha256,
                verified_bytes=event.verified_bytes,
                failure_code="",
                failure_detail="",
            )
        case c.ArtifactSetVerificationFailed() if state is not None:
            return _replace(state, verified_manifest="", failure_code=event.code, failure_detail=event.detail)
        case c.ArtifactSetQuarantined() if state is not None:
            return _replace(state, quarantined=True, quarantine_reason=event.reason)
    return state


def evolve_node(state: NodeState | None, event: Event, seq: int) -> NodeState | None:
    match event:
        case c.NodeRegistered():
            return NodeState(
                node_id=event.node_id,
                hardware_fingerprint=event.hardware_fingerprint,
                accelerators=event.accelerators,
                protocol_capabilities=event.protocol_capabilities,
                runtimes=event.runtimes,
                registered_seq=seq,
                enabled=state.enabled if state else True,
                production_eligible=state.production_eligible if state else True,
                decommissioned=state.decommissioned if state else False,
                generation=state.generation if state else 0,
            )
        case c.NodeEnabled() if state is not None:
            return _replace(state, enabled=True)
        case c.NodeDisabled() if state is not None:
            return _replace(state, enabled=False)
        case c.NodeProductionEligibilityChanged() if state is not None:
            return _replace(state, production_eligible=event.eligible)
        case c.NodeDecommissioned() if state is not None:
            return _replace(state, decommissioned=True)
        case c.WorkerStarted() if state is not None:
            return _replace(state, generation=event.generation)
    return state


def fold_node_from_latest(records: Iterable[RecordedEvent]) -> NodeState | None:
    """The state `fold(evolve_node, ...)` of the node's whole log gives, from only the last event of
    each type (`EventStore.load_latest_of_each`: no walk through a long log to a node registered at
    its start). Every node event but a registration sets its field outright, and a registration
    carries those fields forward, so the latest registration first and then the others in stream
    order come to the same state (`tests/unit/gateway/test_node_fold_from_latest.py`)."""
    ordered = sorted(records, key=lambda r: (not isinstance(r.event, c.NodeRegistered), r.sequence))
    return fold(evolve_node, ordered)


def evolve_candidate(state: CandidateState | None, event: Event, seq: int) -> CandidateState | None:
    match event:
        case c.CandidateRegistered():
            return CandidateState(
                candidate_id=event.candidate_id,
                capability=event.capability,
                artifact_set_id=event.artifact_set_id,
                runtime_profile=dict(event.runtime_profile),
                deployment_config=dict(event.deployment_config),
            )
        case c.ProbeRequested() if state is not None:
            record = ProbeRecord(
                probe_id=event.probe_id,
                node_id=event.node_id,
                accelerator_id=event.accelerator_id,
                lab_approval_id=event.lab_approval_id,
                requested_seq=seq,
                manifest_sha256=event.manifest_sha256,
            )
            return _replace(state, probes={**state.probes, event.probe_id: record})
        case c.ProbeCompleted() | c.ProbeFailed() if state is not None:
            current = state.probes.get(event.probe_id)
            if current is None or current.status != "requested":
                return state  # a probe we did not ask for, or a redelivered outcome
            if isinstance(event, c.ProbeCompleted):
                done = _replace(current, status="completed", result=event, finished_seq=seq)
            else:
                done = _replace(
                    current,
                    status="failed",
                    finished_seq=seq,
                    failure_code=event.code,
                    failure_detail=event.detail,
                )
            return _replace(state, probes={**state.probes, event.probe_id: done})
        case c.CandidateLabReady() if state is not None:
            return _replace(state, lab_ready_probe=event.probe_id)
    return state


def evolve_approval(state: ApprovalState | None, event: Event, seq: int) -> ApprovalState | None:
    match event:
        case c.LabExecutionApproved():
            return ApprovalState(
                approval_id=event.approval_id,
                kind="lab_execution",
                candidate_id=event.candidate_id,
                node_ids=event.node_ids,
                expires_at=event.expires_at,
            )
        case c.ProductionApproved():
            # Approving the same facts again clears a staleness (the facts are back), never a
            # revocation: one recorded before approving again was refused stays in force.
            return ApprovalState(
                approval_id=event.approval_id,
                kind="production",
                candidate_id=event.candidate_id,
                evidence_fingerprint=event.evidence_fingerprint,
                evidence=dict(event.evidence),
                approved_by=event.approved_by,
                reason=event.reason,
                revoked=state.revoked if state else False,
                revoke_reason=state.revoke_reason if state else "",
            )
        case c.ApprovalRevoked() if state is not None:
            return _replace(state, revoked=True, revoke_reason=event.reason)
        case c.ApprovalMarkedStale() if state is not None:
            return _replace(state, stale=True, stale_facts=event.changed_facts)
    return state


def evolve_project(state: ProjectState | None, event: Event, seq: int) -> ProjectState | None:
    match event:
        case c.ProjectRegistered():
            return ProjectState(project_id=event.project_id, name=event.name, owner=event.owner)
        case c.ProjectBoundToChannel() if state is not None:
            return _replace(state, channels={**state.channels, event.capability: event.channel})
        case c.ClientBoundToProject() if state is not None:
            clients = state.clients if event.client_id in state.clients else (*state.clients, event.client_id)
            return _replace(state, clients=clients)
        case c.ProjectFitEvidenceRecorded() if state is not None:
            return _replace(state, fit={**state.fit, event.capability: event})
    return state


def evolve_policy(
    state: c.SchedulerPolicyRevised | None, event: Event, seq: int
) -> c.SchedulerPolicyRevised | None:
    return event if isinstance(event, c.SchedulerPolicyRevised) else state


def fold(evolve: Callable[[S | None, Event, int], S | None], records: Iterable[RecordedEvent]) -> S | None:
    state: S | None = None
    for record in records:
        if not isinstance(record.event, UnknownEvent):
            state = evolve(state, record.event, record.sequence)
    return state
