"""`ClientIndex`: clients and credentials in memory, and the authentication checks over them. Pure.

Authentication is a dictionary look-up by the presented key's sha256, confirmed with
`hmac.compare_digest`; no key is ever held in plaintext. Check order follows the seed: bearer
present → key known → not revoked → not expired (or past its rotation grace) → client enabled;
`authorize` then checks the `capability@version` scope.
"""

from __future__ import annotations

from datetime import datetime

from eventstore.records import RecordedEvent
from gateway.clients import keys
from gateway.clients.evolve import apply_record
from gateway.clients.model import ClientPrincipal, ClientState, Credential
from streams import subjects
from streams.codes import ServingError


def _unauthorized(message: str) -> ServingError:
    return ServingError("CAPABILITY_NOT_AUTHORIZED", message, http_status=401)


def _forbidden(message: str, param: str | None = None) -> ServingError:
    return ServingError("CAPABILITY_NOT_AUTHORIZED", message, param, http_status=403)


class ClientIndex:
    def __init__(self) -> None:
        self._clients: dict[str, ClientState] = {}
        self._by_hash: dict[str, tuple[str, str]] = {}  # key sha256 -> (client id, credential id)
        self.applied_sequence = 0

    def apply(self, record: RecordedEvent) -> None:
        """Fold one client event in; records at or below the last applied sequence are ignored."""
        if record.sequence <= self.applied_sequence:
            return
        self.applied_sequence = record.sequence
        parsed = subjects.parse_event_subject(record.subject)
        if parsed is None or parsed[0] != subjects.Aggregate.CLIENT.value:
            return
        client_id = parsed[1]
        after = apply_record(self._clients.get(client_id), record)
        if after is None:
            return
        self._clients[client_id] = after
        for credential in after.credentials:
            # Revoked keys stay indexed, so a revoked key is reported as revoked, not unknown.
            self._by_hash[credential.key_sha256] = (client_id, credential.credential_id)

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

    @staticmethod
    def authorize(principal: ClientPrincipal, capability: str) -> None:
        if capability not in principal.scopes:
            raise _forbidden(f"this client is not authorized for {capability}", "model")

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
