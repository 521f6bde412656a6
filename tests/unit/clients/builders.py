"""Shared builders for the client unit tests: keys, commands and a pure command runner."""

from __future__ import annotations

import base64
import hashlib
from datetime import UTC, datetime, timedelta

from eventstore.records import RecordedEvent
from gateway.clients.decide import decide
from gateway.clients.evolve import apply_record
from gateway.clients.index import ClientIndex
from gateway.clients.model import ClientState, Command, CreateClient, NewKey
from streams.events import Event
from streams.events.control import ClientBoundToProject, ProjectBoundToChannel
from streams.subjects import Aggregate, event_subject

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
CLIENT = "cl_app"


def secret_from(seed: bytes) -> str:
    raw = hashlib.sha256(seed).digest()
    return "mf_" + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def new_key(credential_id: str, expires_at: datetime | None = None) -> tuple[str, NewKey]:
    secret = secret_from(credential_id.encode())
    return secret, NewKey(credential_id, hashlib.sha256(secret.encode()).hexdigest(), secret[:10], expires_at)


def create(
    *,
    scopes: tuple[str, ...] = ("rag.embedding@1",),
    rpm: int = 60,
    concurrency: int = 4,
    expires_at: datetime | None = None,
    project_id: str | None = None,
) -> tuple[str, CreateClient]:
    secret, key = new_key("cred_first", expires_at)
    return secret, CreateClient(
        CLIENT, "app", scopes, rpm, concurrency, key, priority=1,
        project_id=project_id, project_known=project_id is not None,
    )  # fmt: skip


class Runner:
    """Decide, record and fold, as the service and the directory would, without NATS."""

    def __init__(self) -> None:
        self.state: ClientState | None = None
        self.index = ClientIndex()
        self.sequence = 0
        self.events: list[Event] = []

    def run(self, command: Command, now: datetime = T0) -> list[Event]:
        events = decide(self.state, command, now)
        for event in events:
            self.sequence += 1
            record = RecordedEvent(
                self.sequence,
                event_subject(Aggregate.CLIENT, command.client_id, type(event).__name__),
                None,
                event,
            )
            self.state = apply_record(self.state, record)
            self.index.apply(record)
        self.events.extend(events)
        return events

    def record_project(self, event: ProjectBoundToChannel | ClientBoundToProject) -> None:
        """A project event, as the directory's feed hands it to the index."""
        self.sequence += 1
        subject = event_subject(Aggregate.PROJECT, event.project_id, type(event).__name__)
        self.index.apply(RecordedEvent(self.sequence, subject, None, event))


def bearer(secret: str) -> str:
    return f"Bearer {secret}"


def later(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)
