"""Clients (never a key or a key hash), their credentials, and projects -> rows."""

from __future__ import annotations

from projections.handlers.ops import Op, up
from streams.events import control as c
from streams.events.base import Event


def ops(event: Event, seq: int, at: str | None) -> list[Op] | None:
    """Rows for a client's, a credential's or a project's event; None when the event is not one of this module's."""
    match event:
        case c.ClientCreated():
            return [
                up(
                    "clients",
                    (event.client_id,),
                    name=event.name,
                    scopes=event.scopes,
                    requests_per_minute=event.requests_per_minute,
                    max_concurrency=event.max_concurrency,
                    priority=event.priority,
                    project_id=event.project_id,
                    integration_environment=event.integration_environment,
                    purpose=event.purpose,
                    enabled=True,
                    created_at=at,
                    updated_at=at,
                )
            ]
        case c.ClientLimitsChanged():
            return [
                up(
                    "clients",
                    (event.client_id,),
                    scopes=event.scopes,
                    requests_per_minute=event.requests_per_minute,
                    max_concurrency=event.max_concurrency,
                    priority=event.priority,
                    updated_at=at,
                )
            ]
        case c.CredentialIssued():
            return [
                up(
                    "credentials",
                    (event.credential_id,),
                    client_id=event.client_id,
                    key_prefix=event.key_prefix,
                    state="active",
                    expires_at=event.expires_at,
                    issued_at=at,
                    updated_at=at,
                )
            ]
        case c.CredentialRotated():
            return [
                up(
                    "credentials",
                    (event.old_credential_id,),
                    client_id=event.client_id,
                    state="rotated" if event.grace_until else "replaced",
                    grace_until=event.grace_until,
                    replaced_by=event.new_credential_id,
                    updated_at=at,
                ),
                up(
                    "credentials",
                    (event.new_credential_id,),
                    client_id=event.client_id,
                    key_prefix=event.key_prefix,
                    state="active",
                    expires_at=event.expires_at,
                    issued_at=at,
                    updated_at=at,
                ),
            ]
        case c.CredentialRevoked():
            return [
                up(
                    "credentials",
                    (event.credential_id,),
                    client_id=event.client_id,
                    state="revoked",
                    revoke_reason=event.reason,
                    updated_at=at,
                )
            ]
        case c.ClientDisabled():
            return [
                up("clients", (event.client_id,), enabled=False, disabled_reason=event.reason, updated_at=at)
            ]
        case c.ClientEnabled():
            return [up("clients", (event.client_id,), enabled=True, disabled_reason=None, updated_at=at)]
        case c.ProjectRegistered():
            return [up("projects", (event.project_id,), name=event.name, owner=event.owner, registered_at=at)]
        case c.ProjectBoundToChannel():
            return [
                up(
                    "project_channels",
                    (event.project_id, event.capability),
                    channel=event.channel,
                    bound_at=at,
                )
            ]
        case c.ClientBoundToProject():
            return [
                up("project_clients", (event.project_id, event.client_id), bound_at=at),
                up("clients", (event.client_id,), project_id=event.project_id, updated_at=at),
            ]
        case c.ProjectFitEvidenceRecorded():
            return [
                up(
                    "project_fit_evidence",
                    (event.project_id, event.capability),
                    evidence=event.evidence,
                    passed=event.passed,
                    failed_gates=event.failed_gates,
                    recorded_at=at,
                )
            ]
    return None
