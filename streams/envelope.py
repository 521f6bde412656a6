"""The event envelope: facts about an event carried as NATS headers.

Audit consumers filter on headers without decoding payloads; the payload is the event Struct alone.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum

import msgspec

from streams.ids import random_bits

H_MSG_ID = "Nats-Msg-Id"
H_EVENT_TYPE = "Mf-Event-Type"
H_SCHEMA_VERSION = "Mf-Schema-Version"
H_AGGREGATE_TYPE = "Mf-Aggregate-Type"
H_AGGREGATE_ID = "Mf-Aggregate-Id"
H_OCCURRED_AT = "Mf-Occurred-At"
H_ACTOR = "Mf-Actor"
H_CORRELATION_ID = "Mf-Correlation-Id"
H_CAUSATION_ID = "Mf-Causation-Id"


class ActorKind(StrEnum):
    OPERATOR = "operator"
    CLIENT = "client"
    AGENT = "agent"
    GATEWAY = "gateway"
    SYSTEM = "system"


class Actor(msgspec.Struct, frozen=True):
    kind: ActorKind
    id: str

    def __str__(self) -> str:
        return f"{self.kind.value}:{self.id}"

    @classmethod
    def parse(cls, text: str) -> Actor:
        kind, _, ident = text.partition(":")
        return cls(ActorKind(kind), ident)


SYSTEM = Actor(ActorKind.SYSTEM, "modelforge")


def new_id() -> str:
    """A unique id for events, requests, leases: 128 random bits as hex (token-safe); see
    `streams.ids` for why they are not drawn from the `random` module's generator."""
    return f"{random_bits(128):032x}"


def utcnow() -> datetime:
    return datetime.now(UTC)


class Envelope(msgspec.Struct, frozen=True, kw_only=True):
    event_id: str
    event_type: str
    schema_version: int
    aggregate_type: str
    aggregate_id: str
    occurred_at: datetime
    actor: Actor
    correlation_id: str | None = None
    causation_id: str | None = None

    def headers(self) -> dict[str, str]:
        h = {
            H_MSG_ID: self.event_id,
            H_EVENT_TYPE: self.event_type,
            H_SCHEMA_VERSION: str(self.schema_version),
            H_AGGREGATE_TYPE: self.aggregate_type,
            H_AGGREGATE_ID: self.aggregate_id,
            H_OCCURRED_AT: self.occurred_at.isoformat(),
            H_ACTOR: str(self.actor),
        }
        if self.correlation_id:
            h[H_CORRELATION_ID] = self.correlation_id
        if self.causation_id:
            h[H_CAUSATION_ID] = self.causation_id
        return h

    @classmethod
    def from_headers(cls, headers: dict[str, str]) -> Envelope:
        """Raises KeyError / ValueError on a message that is not one of ours."""
        return cls(
            event_id=headers[H_MSG_ID],
            event_type=headers[H_EVENT_TYPE],
            schema_version=int(headers[H_SCHEMA_VERSION]),
            aggregate_type=headers[H_AGGREGATE_TYPE],
            aggregate_id=headers[H_AGGREGATE_ID],
            occurred_at=datetime.fromisoformat(headers[H_OCCURRED_AT]),
            actor=Actor.parse(headers[H_ACTOR]),
            correlation_id=headers.get(H_CORRELATION_ID),
            causation_id=headers.get(H_CAUSATION_ID),
        )
