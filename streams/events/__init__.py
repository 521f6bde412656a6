"""The v1 event catalogue: every fact ModelForge records, in one place.

`CATALOGUE` maps an event type name to its Struct and the aggregate that owns it. Request events
(`streams.events.requests`) live on MF_REQUESTS and belong to no control-plane aggregate.
"""

from __future__ import annotations

from streams.events import control as c
from streams.events import identity as i
from streams.events import requests as r
from streams.events import serving as s
from streams.events.base import Event
from streams.subjects import Aggregate

_BY_AGGREGATE: dict[Aggregate, tuple[type[Event], ...]] = {
    Aggregate.CAPABILITY: (c.CapabilityContractRegistered,),
    Aggregate.ARTIFACT_SET: (
        c.ArtifactSetRegistered,
        c.ArtifactSetVerified,
        c.ArtifactSetVerificationFailed,
        c.ArtifactSetQuarantined,
        c.ArtifactSetFetchProgressed,
    ),
    Aggregate.NODE: (
        c.NodeRegistered,
        c.NodeEnabled,
        c.NodeDisabled,
        c.NodeProductionEligibilityChanged,
        c.NodeDecommissioned,
        c.WorkerStarted,
        c.NodeLost,
        i.NodeCredentialsIssued,
        i.NodeCredentialsRevoked,
        i.ForgedEventRefused,
    ),
    Aggregate.CANDIDATE: (
        c.CandidateRegistered,
        c.ProbeRequested,
        c.ProbeCompleted,
        c.ProbeFailed,
        c.CandidateLabReady,
    ),
    Aggregate.APPROVAL: (
        c.LabExecutionApproved,
        c.ProductionApproved,
        c.ApprovalRevoked,
        c.ApprovalMarkedStale,
    ),
    Aggregate.DEPLOYMENT: (
        s.DeploymentPromoted,
        s.ExperimentCreated,
        s.ExperimentActivated,
        s.ExperimentDeactivated,
        s.DeploymentDraining,
        s.DeploymentDrained,
        s.ResidencyPolicyChanged,
        s.DeploymentScalingChanged,
        s.DeploymentCapsChanged,
        s.RoutingWeightsChanged,
        s.RollbackPolicyChanged,
    ),
    Aggregate.ACCELERATOR: (
        s.LeaseGranted,
        s.LeaseReleased,
        s.LeaseExpired,
        s.ResidencyLoadRequested,
        s.ResidencyLoading,
        s.ResidencyLoaded,
        s.ResidencyLoadFailed,
        s.ResidencyUnloading,
        s.ResidencyUnloaded,
        s.ResidencyUnloadFailed,
        s.ResidencyReconciled,
        s.EvictionPlanned,
        s.EvictionCompleted,
        s.PressureChanged,
        s.PlacementRejected,
        s.PlacementDryRun,
        s.CoResidencyProven,
        s.ResidencyHealthChecked,
        s.ResidencyDrained,
        s.AgentJobFailed,
    ),
    Aggregate.CLIENT: (
        c.ClientCreated,
        c.ClientLimitsChanged,
        c.CredentialIssued,
        c.CredentialRotated,
        c.CredentialRevoked,
        c.ClientDisabled,
        c.ClientEnabled,
    ),
    Aggregate.PROJECT: (
        c.ProjectRegistered,
        c.ProjectBoundToChannel,
        c.ClientBoundToProject,
        c.ProjectFitEvidenceRecorded,
    ),
    Aggregate.SCHEDULER_POLICY: (c.SchedulerPolicyRevised,),
}

REQUEST_EVENTS: tuple[type[Event], ...] = (
    r.RequestAccepted,
    r.RequestCompleted,
    r.RequestFailed,
    r.RequestRejected,
    r.ClientKeyUsed,
)

AGGREGATE_OF: dict[type[Event], Aggregate] = {
    cls: agg for agg, classes in _BY_AGGREGATE.items() for cls in classes
}

CATALOGUE: dict[str, type[Event]] = {cls.event_type(): cls for cls in (*AGGREGATE_OF, *REQUEST_EVENTS)}


def events_of(aggregate: Aggregate) -> tuple[type[Event], ...]:
    return _BY_AGGREGATE[aggregate]


__all__ = ["AGGREGATE_OF", "CATALOGUE", "REQUEST_EVENTS", "Event", "events_of"]
