"""The client command side: load the aggregate, decide, append with its version, retry on conflict.

The plaintext key of a create or rotate is returned once, in `IssuedKey`, and kept nowhere else:
events carry its sha256 and a display prefix only.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from eventstore import reading
from eventstore.errors import ConcurrencyConflict
from eventstore.store import EventStore, ExpectedVersion
from gateway.clients import keys
from gateway.clients.decide import decide
from gateway.clients.evolve import fold
from gateway.clients.index import FEED, ClientIndex
from gateway.clients.model import (
    ChangeLimits,
    ClientState,
    Command,
    CreateClient,
    DisableClient,
    EnableClient,
    NewKey,
    RevokeCredential,
    RotateCredential,
)
from streams import subjects
from streams.codes import ServingError
from streams.envelope import SYSTEM, Actor, new_id, utcnow
from streams.subjects import Aggregate

CONFLICT_ATTEMPTS = 8


@dataclass(frozen=True, slots=True)
class IssuedKey:
    """The answer to create/rotate: the only time the plaintext key exists outside the caller."""

    client_id: str
    credential_id: str
    key: str
    key_prefix: str
    expires_at: datetime | None
    sequence: int  # stream sequence of the append: pass to ClientDirectory.wait_until_applied

    def __repr__(self) -> str:
        return (
            f"IssuedKey(client_id={self.client_id!r}, credential_id={self.credential_id!r}, "
            f"key_prefix={self.key_prefix!r}, sequence={self.sequence})"
        )


def client_id_for(name: str) -> str:
    """A client's id follows from its name, so the event store's "no stream yet" check makes names
    unique without a second aggregate."""
    digest = hashlib.sha256(name.strip().casefold().encode()).hexdigest()
    return f"cl_{digest[:24]}"


class ClientService:
    def __init__(
        self, store: EventStore, *, actor: Actor = SYSTEM, clock: Callable[[], datetime] = utcnow
    ) -> None:
        self.store = store
        self.actor = actor
        self.clock = clock

    async def create(
        self,
        name: str,
        scopes: tuple[str, ...] | list[str],
        *,
        requests_per_minute: int = 60,
        max_concurrency: int = 4,
        priority: int = 0,
        project_id: str | None = None,
        expires_in: timedelta | None = None,
        integration_environment: str = "",
        purpose: str = "",
    ) -> IssuedKey:
        client_id = client_id_for(name)
        plain, new = self._new_key(expires_in)
        command = CreateClient(
            client_id=client_id,
            name=name,
            scopes=tuple(scopes),
            requests_per_minute=requests_per_minute,
            max_concurrency=max_concurrency,
            first_key=new,
            priority=priority,
            project_id=project_id,
            project_known=project_id is not None and await self._project_exists(project_id),
            integration_environment=integration_environment,
            purpose=purpose,
        )
        sequence = await self.execute(command)
        return IssuedKey(client_id, new.credential_id, plain.secret, plain.prefix, new.expires_at, sequence)

    async def rotate(
        self,
        client_id: str,
        *,
        grace_s: float = 0.0,
        credential_id: str | None = None,
        expires_in: timedelta | None = None,
    ) -> IssuedKey:
        plain, new = self._new_key(expires_in)
        sequence = await self.execute(RotateCredential(client_id, new, grace_s, credential_id))
        return IssuedKey(client_id, new.credential_id, plain.secret, plain.prefix, new.expires_at, sequence)

    async def revoke(self, client_id: str, credential_id: str, reason: str = "") -> int:
        return await self.execute(RevokeCredential(client_id, credential_id, reason))

    async def disable(self, client_id: str, reason: str = "") -> int:
        return await self.execute(DisableClient(client_id, reason))

    async def enable(self, client_id: str) -> int:
        return await self.execute(EnableClient(client_id))

    async def change_limits(
        self,
        client_id: str,
        *,
        scopes: tuple[str, ...] | None = None,
        requests_per_minute: int | None = None,
        max_concurrency: int | None = None,
        priority: int | None = None,
    ) -> int:
        command = ChangeLimits(client_id, scopes, requests_per_minute, max_concurrency, priority)
        return await self.execute(command)

    async def get(self, client_id: str) -> ClientState | None:
        records, _ = await self.store.load(Aggregate.CLIENT, _checked_id(client_id))
        return fold(records)

    async def all_clients(self) -> list[ClientState]:
        """Every client, folded from the log as the key directory folds it (admin use; the hot
        path reads ClientDirectory): its project is the later of its own and a project's binding."""
        records, _ = await reading.read_subjects_range(self.store.client, subjects.EVENTS_STREAM, FEED)
        index = ClientIndex()
        for record in records:
            index.apply(record)
        return index.clients()

    async def execute(self, command: Command) -> int:
        """Decide and append; returns the aggregate's version after the command (its last sequence).

        A command that changes nothing returns the current version without appending.
        """
        client_id = _checked_id(command.client_id)
        for _ in range(CONFLICT_ATTEMPTS):
            records, version = await self.store.load(Aggregate.CLIENT, client_id)
            events = decide(fold(records), command, self.clock())
            if not events:
                return version
            expected = version if version else ExpectedVersion.NO_STREAM
            try:
                return await self.store.append(
                    Aggregate.CLIENT, client_id, events, expected, actor=self.actor
                )
            except ConcurrencyConflict:
                continue  # someone else changed this client: reload and decide again
        raise ServingError("STATE_CONFLICT", f"client {client_id!r} kept changing; try again")

    async def _project_exists(self, project_id: str) -> bool:
        try:
            subjects.token(project_id, "project id")
        except subjects.InvalidSubjectToken:
            return False
        _, version = await self.store.load(Aggregate.PROJECT, project_id)
        return version > 0

    def _new_key(self, expires_in: timedelta | None) -> tuple[keys.PlainKey, NewKey]:
        if expires_in is not None and expires_in <= timedelta(0):
            raise ServingError("INVALID_INPUT", "a credential's lifetime must be positive", "expires_in")
        try:
            expires_at = self.clock() + expires_in if expires_in is not None else None
        except OverflowError:
            raise ServingError(
                "INVALID_INPUT", "a credential's lifetime ends past year 9999", "expires_in"
            ) from None
        plain = keys.new_key()
        return plain, NewKey(f"cred_{new_id()[:20]}", plain.sha256, plain.prefix, expires_at)


def _checked_id(client_id: str) -> str:
    try:
        return subjects.token(client_id, "client id")
    except subjects.InvalidSubjectToken as exc:
        raise ServingError("CLIENT_NOT_FOUND", str(exc), "client_id") from None
