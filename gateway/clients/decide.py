"""Decide what a client command means: `decide(state, command, now) -> events`. Pure.

Invalid commands raise `ServingError` with a stable code and produce no events. Commands that
would change nothing (revoking a revoked key, disabling a disabled client) return no events.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from gateway.clients.model import (
    ChangeLimits,
    ClientState,
    Command,
    CreateClient,
    DisableClient,
    EnableClient,
    IssueCredential,
    NewKey,
    RevokeCredential,
    RotateCredential,
)
from streams import text
from streams.codes import ServingError
from streams.contracts import CONTRACTS
from streams.events import Event
from streams.events.control import (
    ClientCreated,
    ClientDisabled,
    ClientEnabled,
    ClientLimitsChanged,
    CredentialIssued,
    CredentialRevoked,
    CredentialRotated,
)
from streams.subjects import InvalidSubjectToken, token

MAX_NAME_CHARS = 200
MAX_GRACE_S = 30 * 86_400.0  # a month: a longer overlap is a second credential, not a rotation


def decide(state: ClientState | None, command: Command, now: datetime) -> list[Event]:
    match command:
        case CreateClient():
            return _create(state, command, now)
        case _ if state is None:
            raise ServingError("CLIENT_NOT_FOUND", f"no service client {command.client_id!r}", "client_id")
        case IssueCredential():
            _check_key(command.key, now, state)
            return [_issued(state.client_id, command.key)]
        case RotateCredential():
            return _rotate(state, command, now)
        case RevokeCredential():
            _check_reason(command.reason)
            credential = state.credential(command.credential_id)
            if credential is None:
                raise ServingError(
                    "CREDENTIAL_NOT_FOUND",
                    f"client {state.client_id!r} has no credential {command.credential_id!r}",
                    "credential_id",
                )
            if credential.revoked:
                return []
            return [
                CredentialRevoked(
                    client_id=state.client_id, credential_id=credential.credential_id, reason=command.reason
                )
            ]
        case DisableClient():
            _check_reason(command.reason)
            return [ClientDisabled(client_id=state.client_id, reason=command.reason)] if state.enabled else []
        case EnableClient():
            return [] if state.enabled else [ClientEnabled(client_id=state.client_id)]
        case ChangeLimits():
            return _change_limits(state, command)
    raise AssertionError(f"unhandled command {command!r}")  # pragma: no cover


def _create(state: ClientState | None, command: CreateClient, now: datetime) -> list[Event]:
    if state is not None:
        raise ServingError("CLIENT_EXISTS", f"a service client named {command.name!r} already exists", "name")
    _check_id(command.client_id, "client_id")
    name = command.name.strip()
    if not name or len(name) > MAX_NAME_CHARS or not name.isprintable():
        raise ServingError(
            "INVALID_INPUT", f"a client name is 1-{MAX_NAME_CHARS} printable characters", "name"
        )
    scopes = check_scopes(command.scopes)
    _check_limits(command.requests_per_minute, command.max_concurrency, command.priority)
    _check_key(command.first_key, now)
    if command.project_id is not None and not command.project_known:
        raise ServingError("PROJECT_NOT_FOUND", f"no project {command.project_id!r}", "project_id")
    created = ClientCreated(
        client_id=command.client_id,
        name=name,
        scopes=scopes,
        requests_per_minute=command.requests_per_minute,
        max_concurrency=command.max_concurrency,
        priority=command.priority,
        project_id=command.project_id,
        integration_environment=text.check(
            "integration_environment", command.integration_environment.strip(), text.NAME
        ),
        purpose=text.check("purpose", command.purpose.strip(), text.REASON),
    )
    return [created, _issued(command.client_id, command.first_key)]


def _rotate(state: ClientState, command: RotateCredential, now: datetime) -> list[Event]:
    """Replace the current credential (or the one named) with a new key. A client with no current
    credential (every key revoked, as after a leak) is issued a new key, as the seed's rotate does:
    otherwise nothing could give it one, since its name is taken for good."""
    if command.credential_id is None:
        old = state.current_credential()
    else:
        found = state.credential(command.credential_id)
        if found is None or found.revoked or found.rotated_away:
            raise ServingError(
                "CREDENTIAL_NOT_FOUND",
                f"client {state.client_id!r} has no active credential {command.credential_id!r}",
                "credential_id",
            )
        old = found
    if not 0 <= command.grace_s <= MAX_GRACE_S:
        raise ServingError("INVALID_INPUT", f"grace must be 0-{MAX_GRACE_S:.0f} seconds", "grace_s")
    _check_key(command.key, now, state)
    if old is None:
        return [_issued(state.client_id, command.key)]
    grace_until = now + timedelta(seconds=command.grace_s) if command.grace_s > 0 else None
    return [
        CredentialRotated(
            client_id=state.client_id,
            old_credential_id=old.credential_id,
            new_credential_id=command.key.credential_id,
            key_sha256=command.key.key_sha256,
            key_prefix=command.key.key_prefix,
            grace_until=grace_until,
            expires_at=command.key.expires_at,
        )
    ]


def _change_limits(state: ClientState, command: ChangeLimits) -> list[Event]:
    scopes = check_scopes(command.scopes) if command.scopes is not None else state.scopes
    rpm = (
        command.requests_per_minute if command.requests_per_minute is not None else state.requests_per_minute
    )
    concurrency = command.max_concurrency if command.max_concurrency is not None else state.max_concurrency
    priority = command.priority if command.priority is not None else state.priority
    _check_limits(rpm, concurrency, priority)
    if (scopes, rpm, concurrency, priority) == (
        state.scopes,
        state.requests_per_minute,
        state.max_concurrency,
        state.priority,
    ):
        return []
    return [
        ClientLimitsChanged(
            client_id=state.client_id,
            scopes=scopes,
            requests_per_minute=rpm,
            max_concurrency=concurrency,
            priority=priority,
        )
    ]


def check_scopes(scopes: tuple[str, ...]) -> tuple[str, ...]:
    """Scopes name published contracts as `capability@version`; returned sorted, without repeats."""
    if not scopes:
        raise ServingError("INVALID_INPUT", "a client needs at least one capability@version scope", "scopes")
    for scope in scopes:
        name, at, version = scope.partition("@")
        if not name or not at or not version.isdigit():
            raise ServingError(
                "INVALID_INPUT", f"scope {scope!r} is not capability@version (e.g. rag.embedding@1)", "scopes"
            )
        if scope not in CONTRACTS:
            known = ", ".join(sorted(CONTRACTS))
            raise ServingError(
                "UNKNOWN_CAPABILITY", f"scope {scope!r} names no contract; known: {known}", "scopes"
            )
    return tuple(sorted(set(scopes)))


# Beyond these a limit is no limit, and a concurrency slot is looked for among that many subjects.
MAX_REQUESTS_PER_MINUTE = 10_000_000
MAX_CONCURRENCY = 10_000
MAX_PRIORITY = 1_000


def _check_reason(reason: str) -> None:
    text.check("reason", reason, text.REASON)  # an operator's note, kept in every copy of the event log


def _check_limits(rpm: int, concurrency: int, priority: int) -> None:
    if not 0 < rpm <= MAX_REQUESTS_PER_MINUTE:
        raise ServingError(
            "INVALID_INPUT",
            f"requests per minute must be between 1 and {MAX_REQUESTS_PER_MINUTE}",
            "requests_per_minute",
        )
    if not 0 < concurrency <= MAX_CONCURRENCY:
        raise ServingError(
            "INVALID_INPUT", f"max concurrency must be between 1 and {MAX_CONCURRENCY}", "max_concurrency"
        )
    if not 0 <= priority <= MAX_PRIORITY:
        raise ServingError("INVALID_INPUT", f"priority must be between 0 and {MAX_PRIORITY}", "priority")


def _check_key(key: NewKey, now: datetime, state: ClientState | None = None) -> None:
    _check_id(key.credential_id, "credential_id")
    if state is not None and state.credential(key.credential_id) is not None:
        raise ServingError(
            "STATE_CONFLICT", f"credential {key.credential_id!r} already exists", "credential_id"
        )
    if len(key.key_sha256) != 64 or any(ch not in "0123456789abcdef" for ch in key.key_sha256):
        raise ServingError(
            "INVALID_INPUT", "a key is stored as its lowercase sha256 hex digest", "key_sha256"
        )
    if key.expires_at is not None and key.expires_at <= now:
        raise ServingError("INVALID_INPUT", "a credential cannot expire in the past", "expires_at")


def _check_id(value: str, what: str) -> None:
    try:
        token(value, what)
    except InvalidSubjectToken as exc:
        raise ServingError("INVALID_INPUT", str(exc), what) from None


def _issued(client_id: str, key: NewKey) -> CredentialIssued:
    return CredentialIssued(
        client_id=client_id,
        credential_id=key.credential_id,
        key_sha256=key.key_sha256,
        key_prefix=key.key_prefix,
        expires_at=key.expires_at,
    )
