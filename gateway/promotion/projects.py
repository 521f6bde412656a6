"""Projects: registration, channel and client bindings, and project-fit evidence (§5.7). Pure."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import msgspec

from gateway.deployments.model import DeploymentState
from gateway.promotion.evidence import digest
from gateway.promotion.model import ProjectState
from streams import text
from streams.codes import ServingError
from streams.contracts import CONTRACTS
from streams.events import Event
from streams.events import control as c


class RegisterProject(msgspec.Struct, frozen=True):
    project_id: str
    name: str
    owner: str = ""


class BindChannel(msgspec.Struct, frozen=True):
    capability: str
    channel: str  # "stable" or an experiment route


class BindClient(msgspec.Struct, frozen=True):
    client_id: str
    client_known: bool


class FitEvidence(msgspec.Struct, frozen=True, kw_only=True):
    """What an owner reports after trying a deployment on the project's own cases."""

    deployment_id: str
    evidence_class: str  # e.g. OWNER_PHOTO
    recommendation: str  # e.g. PROMOTION_ELIGIBLE
    production_validation: str  # e.g. SATISFIED
    case_count: int
    critical_errors: int = 0
    blockers: Annotated[tuple[str, ...], text.REASON] = ()
    notes: Annotated[str, text.PROSE] = ""


class RecordFit(msgspec.Struct, frozen=True):
    evidence: FitEvidence
    deployment: DeploymentState | None


ProjectCommand = RegisterProject | BindChannel | BindClient | RecordFit


def _evidence_ok(e: FitEvidence) -> bool:
    return (
        e.evidence_class == "OWNER_PHOTO" and e.case_count > 0 and e.critical_errors == 0 and not e.blockers
    )


def fit_gates(e: FitEvidence) -> list[str]:
    failed = []
    if e.recommendation == "PROMOTION_ELIGIBLE" and not (
        _evidence_ok(e) and e.production_validation == "SATISFIED"
    ):
        failed.append("PROJECT_FIT_GATES_FAILED")
    if e.production_validation == "SATISFIED" and not (
        _evidence_ok(e) and e.recommendation == "PROMOTION_ELIGIBLE"
    ):
        failed.append("PROJECT_PRODUCTION_VALIDATION_FAILED")
    return failed


def decide_project(state: ProjectState | None, command: ProjectCommand, now: datetime) -> list[Event]:
    match command:
        case RegisterProject():
            if state is not None:
                return []
            if not command.name.strip():
                raise ServingError("INVALID_INPUT", "a project needs a name", "name")
            return [
                c.ProjectRegistered(project_id=command.project_id, name=command.name, owner=command.owner)
            ]
        case _ if state is None:
            raise ServingError("PROJECT_NOT_FOUND", "unknown project", "project_id")
        case BindChannel():
            if command.capability not in CONTRACTS:
                raise ServingError(
                    "UNKNOWN_CAPABILITY", f"unknown capability {command.capability!r}", "capability"
                )
            if not command.channel.strip():
                raise ServingError("INVALID_INPUT", "a channel is required", "channel")
            if state.channels.get(command.capability) == command.channel:
                return []
            return [
                c.ProjectBoundToChannel(
                    project_id=state.project_id, capability=command.capability, channel=command.channel
                )
            ]
        case BindClient():
            if not command.client_known:
                raise ServingError("CLIENT_NOT_FOUND", f"no client {command.client_id!r}", "client_id")
            if command.client_id in state.clients:
                return []
            return [c.ClientBoundToProject(project_id=state.project_id, client_id=command.client_id)]
        case RecordFit():
            return _record_fit(state, command)
    raise AssertionError(command)  # pragma: no cover


def _record_fit(state: ProjectState, command: RecordFit) -> list[Event]:
    e, deployment = command.evidence, command.deployment
    if deployment is None:
        raise ServingError("DEPLOYMENT_NOT_FOUND", f"no deployment {e.deployment_id!r}", "deployment_id")
    if deployment.capability not in state.channels:
        raise ServingError(
            "PROJECT_CAPABILITY_NOT_BOUND",
            f"the project is not bound to {deployment.capability}",
            http_status=409,
        )
    failed = fit_gates(e)
    if failed:
        raise ServingError(
            failed[0], "the project-fit evidence does not support its claims", details={"failed": failed}
        )
    facts = msgspec.structs.asdict(e)
    facts.pop("deployment_id")
    request_digest = digest(facts)  # deduplicated without the deployment id (reference §5.7)
    current = state.fit.get(deployment.capability)
    if current is not None and current.evidence.get("digest") == request_digest:
        return []
    recorded = {
        k: str(v) if not isinstance(v, tuple) else ",".join(v) for k, v in msgspec.structs.asdict(e).items()
    }
    return [
        c.ProjectFitEvidenceRecorded(
            project_id=state.project_id,
            capability=deployment.capability,
            evidence={**recorded, "digest": request_digest},
            passed=True,
        )
    ]
