"""Fold client events into `ClientState`. Pure: `evolve(state, event) -> state`.

Events that do not apply (an event before `ClientCreated`, a credential id it does not know, an
event of another aggregate) leave the state as it is: a fold never fails on history.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from eventstore.records import RecordedEvent
from gateway.clients.model import ClientState, Credential
from streams.events import Event
from streams.events.control import (
    ClientBoundToProject,
    ClientCreated,
    ClientDisabled,
    ClientEnabled,
    ClientLimitsChanged,
    CredentialIssued,
    CredentialRevoked,
    CredentialRotated,
)


def evolve(state: ClientState | None, event: Event) -> ClientState | None:
    match event:
        case ClientCreated():
            if state is not None:
                return state
            return ClientState(
                client_id=event.client_id,
                name=event.name,
                scopes=tuple(event.scopes),
                requests_per_minute=event.requests_per_minute,
                max_concurrency=event.max_concurrency,
                priority=event.priority,
                project_id=event.project_id,
                integration_environment=event.integration_environment,
                purpose=event.purpose,
            )
        case _ if state is None:
            return None
        case ClientLimitsChanged():
            return replace(
                state,
                scopes=tuple(event.scopes),
                requests_per_minute=event.requests_per_minute,
                max_concurrency=event.max_concurrency,
                priority=event.priority,
            )
        case CredentialIssued():
            if state.credential(event.credential_id) is not None:
                return state
            new = Credential(event.credential_id, event.key_sha256, event.key_prefix, event.expires_at)
            return replace(state, credentials=(*state.credentials, new))
        case CredentialRotated():
            old = state.credential(event.old_credential_id)
            credentials = state.credentials
            if old is not None:
                # No grace: the old key stops at once. With grace: it works until grace_until.
                retired = (
                    replace(old, revoked=True)
                    if event.grace_until is None
                    else replace(old, grace_until=event.grace_until)
                )
                credentials = tuple(retired if c is old else c for c in credentials)
            if state.credential(event.new_credential_id) is None:
                new = Credential(
                    event.new_credential_id, event.key_sha256, event.key_prefix, event.expires_at
                )
                credentials = (*credentials, new)
            return replace(state, credentials=credentials)
        case CredentialRevoked():
            return replace(
                state,
                credentials=tuple(
                    replace(c, revoked=True) if c.credential_id == event.credential_id else c
                    for c in state.credentials
                ),
            )
        case ClientDisabled():
            return replace(state, enabled=False)
        case ClientEnabled():
            return replace(state, enabled=True)
        case ClientBoundToProject():
            # A project-aggregate event; folded here when a reader feeds it in.
            return replace(state, project_id=event.project_id)
        case _:
            return state


def apply_record(state: ClientState | None, record: RecordedEvent) -> ClientState | None:
    """Evolve by one stored record and remember its sequence as the aggregate's version."""
    if not isinstance(record.event, Event):  # an UnknownEvent from a newer writer
        return state
    after = evolve(state, record.event)
    return replace(after, version=record.sequence) if after is not None else None


def fold(records: Iterable[RecordedEvent], state: ClientState | None = None) -> ClientState | None:
    for record in records:
        state = apply_record(state, record)
    return state
