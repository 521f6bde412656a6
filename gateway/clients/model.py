"""The service-client aggregate: its state, the commands it accepts, and the principal it yields.

Pure data. Times are timezone-aware ``datetime`` values (UTC); a credential's key exists only as
its sha256 hex digest and a short display prefix.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class Credential:
    credential_id: str
    key_sha256: str
    key_prefix: str
    expires_at: datetime | None = None
    revoked: bool = False
    grace_until: datetime | None = None  # set when rotated away with a grace period

    def usable_at(self, now: datetime) -> bool:
        """Whether a request presenting this credential at `now` may proceed (client state aside)."""
        if self.revoked:
            return False
        if self.expires_at is not None and self.expires_at <= now:
            return False
        return self.grace_until is None or now < self.grace_until

    @property
    def rotated_away(self) -> bool:
        return self.grace_until is not None


@dataclass(frozen=True, slots=True)
class ClientState:
    client_id: str
    name: str
    scopes: tuple[str, ...]
    requests_per_minute: int
    max_concurrency: int
    priority: int = 0
    project_id: str | None = None
    enabled: bool = True
    integration_environment: str = ""
    purpose: str = ""
    credentials: tuple[Credential, ...] = ()
    version: int = 0  # the aggregate's last stream sequence folded in

    def credential(self, credential_id: str) -> Credential | None:
        return next((c for c in self.credentials if c.credential_id == credential_id), None)

    def current_credential(self) -> Credential | None:
        """The newest credential that is neither revoked nor rotated away (the one to rotate)."""
        live = [c for c in self.credentials if not c.revoked and not c.rotated_away]
        return live[-1] if live else None


@dataclass(frozen=True, slots=True)
class ClientPrincipal:
    """Who is calling, as the HTTP layer and the limiter need it. Holds no secret."""

    client_id: str
    name: str
    scopes: frozenset[str]
    requests_per_minute: int
    max_concurrency: int
    priority: int
    project_id: str | None
    credential_id: str


# ---- commands ------------------------------------------------------------------------------
# Key material reaches a command only as its sha256 and prefix: `decide` stays pure and the
# plaintext key never leaves the service that generated it.


@dataclass(frozen=True, slots=True)
class NewKey:
    credential_id: str
    key_sha256: str
    key_prefix: str
    expires_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class CreateClient:
    client_id: str
    name: str
    scopes: tuple[str, ...]
    requests_per_minute: int
    max_concurrency: int
    first_key: NewKey
    priority: int = 0
    project_id: str | None = None
    project_known: bool = False
    integration_environment: str = ""  # free text, checked by `decide`
    purpose: str = ""  # whether `project_id` names a registered project (the service looks)


@dataclass(frozen=True, slots=True)
class IssueCredential:
    client_id: str
    key: NewKey


@dataclass(frozen=True, slots=True)
class RotateCredential:
    """Replace a credential (default: the current one); the old key works `grace_s` more seconds.
    A client with no current credential (all revoked) is issued a new one."""

    client_id: str
    key: NewKey
    grace_s: float = 0.0
    credential_id: str | None = None


@dataclass(frozen=True, slots=True)
class RevokeCredential:
    client_id: str
    credential_id: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class DisableClient:
    client_id: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class EnableClient:
    client_id: str


@dataclass(frozen=True, slots=True)
class ChangeLimits:
    """New limits; a field left None keeps its current value."""

    client_id: str
    scopes: tuple[str, ...] | None = None
    requests_per_minute: int | None = None
    max_concurrency: int | None = None
    priority: int | None = None


Command = (
    CreateClient
    | IssueCredential
    | RotateCredential
    | RevokeCredential
    | DisableClient
    | EnableClient
    | ChangeLimits
)

__all__ = [
    "ChangeLimits",
    "ClientPrincipal",
    "ClientState",
    "Command",
    "CreateClient",
    "Credential",
    "DisableClient",
    "EnableClient",
    "IssueCredential",
    "NewKey",
    "RevokeCredential",
    "RotateCredential",
]
