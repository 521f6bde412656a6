"""`ClientIndex`: clients and credentials in memory, and the authentication checks over them. Pure.

Authentication is a dictionary look-up by the presented key's sha256, confirmed with
`hmac.compare_digest`; no key is ever held in plaintext. Check order follows the seed: bearer
present → key known → not revoked → not expired (or past its rotation grace) → client enabled;
`authorize` then checks the `capability@version` scope and, for a client bound to a project, that
its project is bound to the capability (`gateway.clients.bindings`). Project events are folded in
too: a client's `ClientBoundToProject` and each project's channels.
"""

from __future__ import annotations

from datetime import datetime

from eventstore.records import RecordedEvent
from gateway.clients import keys
from gateway.clients.bindings import ProjectChannels
from gateway.clients.evolve import apply_record, evolve
from gateway.clients.model import ClientPrincipal, ClientState, Credential
from streams import subjects
from streams.codes import ServingError
from streams.events.control import ClientBoundToProject, ProjectBoundToChannel

# What the index folds: every client event, and the project events that bind clients and channels.
FEED = (
    f"{subjects.EVENTS_PREFIX}.{subjects.Aggregate.CLIENT.value}.>",
    subjects.aggregate_type_filter(subjects.Aggregate.PROJECT, "ClientBoundToProject"),
    subjects.aggregate_type_filter(subjects.Aggregate.PROJECT, "ProjectBoundToChannel"),
)


def _unauthorized(message: str) -> ServingError:
    return ServingError("CAPABILITY_NOT_AUTHORIZED", message, http_status=401)


def _forbidden(message: str, param: str | None = None) -> ServingError:
    return ServingError("CAPABILITY_NOT_AUTHORIZED", message, param, http_status=403)


class ClientIndex:
    def __init__(self) -> None:
        self._clients: dict[str, ClientState] = {}
        self._by_hash: dict[str, tuple[str, str]] = {}  # key sha256 -> (client id, credential id)
        self.projects = ProjectChannels()
        self.applied_sequence = 0

    def apply(self, record: RecordedEvent) -> None:
        """Fold one client or project event in; records at or below the last applied sequence
        are ignored."""
        if record.sequence <= self.applied_sequence:
            return
        self.applied_sequence = record.sequence
        parsed = subjects.parse_event_subject(record.subject)
        if parsed is None:
            return
        if parsed[0] == subjects.Aggregate.CLIENT.value:
            self._apply_client(parsed[1], record)
        elif parsed[0] == subjects.Aggregate.PROJECT.value:
            self._apply_project(record.event)

    def caught_up_to(self, sequence: int) -> None:
        """Everything this index folds up to `sequence` is in (a catch-up read's horizon)."""
        self.applied_sequence = max(self.applied_sequence, sequence)

    def _apply_client(self, client_id: str, record: RecordedEvent) -> None:
        after = apply_record(self._clients.get(client_id), record)
        if after is None:
            return
        self._clients[client_id] = after
        for credential in after.credentials:
            # Revoked keys stay indexed, so a revoked key is reported as revoked, not unknown.
            self._by_hash[credential.key_sha256] = (client_id, credential.credential_id)

    def _apply_project(self, event: object) -> None:
        if isinstance(event, ClientBoundToProject):
            # The later of this and `ClientCreated.project_id` wins; the client's version stays
            # its own aggregate's.
            after = evolve(self._clients.get(event.client_id), event)
            if after is not None:
                self._clients[event.client_id] = after
        elif isinstance(event, ProjectBoundToChannel):
            self.projects.bind(event)

    def authenticate(self, authorization: str | None, now: datetime) -> ClientPrincipal:
        secret = keys.bearer_secret(authorization)
        if secret is None:
            raise _unauthorized("send the API key as 'Authorization: Bearer mf_…'")
        if not keys.well_formed(secret):
            raise _unauthorized("the API key is not valid")
        presented = keys.key_sha256(secret)
        found = self._by_hash.get(presented)
        state = self._clients.get(found[0]) if found else None
        credential = state.credential(found[1]) if state is not None and found else None
        if state is None or credential is None or not keys.same_hash(credential.key_sha256, presented):
            raise _unauthorized("the API key is not valid")
        if credential.revoked:
            raise _unauthorized("the API key has been revoked")
        if credential.expires_at is not None and credential.expires_at <= now:
            raise _unauthorized("the API key has expired")
        if credential.grace_until is not None and credential.grace_until <= now:
            raise _unauthorized("the API key was rotated and its grace period is over")
        if not state.enabled:
            raise _forbidden("the service client is disabled")
        return _principal(state, credential)

    def authorize(self, principal: ClientPrincipal, capability: str) -> None:
        if capability not in principal.scopes:
            raise _forbidden(f"this client is not authorized for {capability}", "model")
        self.projects.check(principal.project_id, capability)

    def client(self, client_id: str) -> ClientState | None:
        return self._clients.get(client_id)

    def clients(self) -> list[ClientState]:
        return sorted(self._clients.values(), key=lambda s: s.name.casefold())


def _principal(state: ClientState, credential: Credential) -> ClientPrincipal:
    return ClientPrincipal(
        client_id=state.client_id,
        name=state.name,
        scopes=frozenset(state.scopes),
        requests_per_minute=state.requests_per_minute,
        max_concurrency=state.max_concurrency,
        priority=state.priority,
        project_id=state.project_id,
        credential_id=credential.credential_id,
    )
