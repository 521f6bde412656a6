"""The command side's access to aggregates: load and fold, decide and append with the loaded
version (retrying on a conflict), create one under a derived identity, fold every aggregate of a
type (admin scale), and create one by a decision over all of its type (a rule across them)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, TypeVar

from eventstore import reading
from eventstore.errors import ConcurrencyConflict
from eventstore.records import RecordedEvent
from eventstore.store import EventStore, ExpectedVersion
from gateway.deployments.evolve import evolve_deployment
from gateway.promotion import evolve as ev
from streams import subjects
from streams.codes import ServingError
from streams.envelope import Actor, utcnow
from streams.events import Event
from streams.subjects import Aggregate

S = TypeVar("S")
C = TypeVar("C")
Evolve = Callable[[Any, Event, int], Any]
Plan = Callable[[Mapping[str, Any]], tuple[str, list[Event]]]

CONFLICT_ATTEMPTS = 8

EVOLVE: dict[Aggregate, Evolve] = {
    Aggregate.ARTIFACT_SET: ev.evolve_artifact_set,
    Aggregate.NODE: ev.evolve_node,
    Aggregate.CANDIDATE: ev.evolve_candidate,
    Aggregate.APPROVAL: ev.evolve_approval,
    Aggregate.DEPLOYMENT: evolve_deployment,
    Aggregate.PROJECT: ev.evolve_project,
    Aggregate.SCHEDULER_POLICY: ev.evolve_policy,
}


def checked_id(value: str, what: str) -> str:
    try:
        return subjects.token(value, what)
    except subjects.InvalidSubjectToken as exc:
        raise ServingError("INVALID_INPUT", str(exc), what.replace(" ", "_")) from None


class Aggregates:
    def __init__(self, store: EventStore, actor: Actor, clock: Callable[[], datetime] = utcnow) -> None:
        self.store = store
        self.actor = actor
        self.clock = clock
        self.last_sequence = 0  # highest sequence this service appended: read-your-writes

    async def load(self, aggregate: Aggregate, aggregate_id: str) -> tuple[Any, int]:
        checked = checked_id(aggregate_id, f"{aggregate.value} id")
        if aggregate is Aggregate.NODE:  # its events span the log: read the latest of each type
            latest, version = await self.store.load_latest_of_each(aggregate, checked)
            return ev.fold_node_from_latest(latest), version
        records, version = await self.store.load(aggregate, checked)
        return ev.fold(EVOLVE[aggregate], records), version

    async def get(self, aggregate: Aggregate, aggregate_id: str) -> Any:
        return (await self.load(aggregate, aggregate_id))[0]

    async def execute(
        self,
        aggregate: Aggregate,
        aggregate_id: str,
        decide: Callable[[Any, C, datetime], list[Event]],
        command: C,
    ) -> tuple[list[Event], int]:
        """Decide against the current state and append; returns (events appended, version)."""
        for _ in range(CONFLICT_ATTEMPTS):
            state, version = await self.load(aggregate, aggregate_id)
            events = decide(state, command, self.clock())
            if not events:
                return [], version
            expected = version if version else ExpectedVersion.NO_STREAM
            try:
                version = await self.store.append(aggregate, aggregate_id, events, expected, actor=self.actor)
            except ConcurrencyConflict:
                continue  # someone else changed it: reload and decide again
            self.last_sequence = max(self.last_sequence, version)
            return events, version
        raise ServingError("STATE_CONFLICT", f"{aggregate.value} {aggregate_id!r} kept changing; try again")

    async def create(self, aggregate: Aggregate, aggregate_id: str, events: list[Event]) -> None:
        """Start an aggregate whose identity is derived from what it is (a config, a route)."""
        try:
            version = await self.store.append(
                aggregate, aggregate_id, events, ExpectedVersion.NO_STREAM, actor=self.actor
            )
        except ConcurrencyConflict:
            return  # the same identity was created concurrently: it exists, which is what was asked
        self.last_sequence = max(self.last_sequence, version)

    async def create_unique(self, aggregate: Aggregate, plan: Plan) -> str:
        """Create one aggregate by a decision over every aggregate of its type (a rule across
        them: one stable deployment per capability, no route named like a stable model).
        `plan(states) -> (id, events)`; no events: nothing to create. The append expects the
        type's version the plan read, so of two such decisions the later is decided again
        against the earlier's result instead of both passing the same check. Returns the id."""
        for _ in range(CONFLICT_ATTEMPTS):
            states, seen = await self.all_at(aggregate)
            aggregate_id, events = plan(states)
            if not events:
                return aggregate_id
            scope = subjects.aggregate_type_filter(aggregate)
            try:
                version = await self.store.append(
                    aggregate, aggregate_id, events, seen, actor=self.actor, scope=scope
                )
            except ConcurrencyConflict:
                continue  # an aggregate of the type changed since `seen`: reload and decide again
            self.last_sequence = max(self.last_sequence, version)
            return aggregate_id
        raise ServingError("STATE_CONFLICT", f"the {aggregate.value}s kept changing; try again")

    async def all(self, aggregate: Aggregate) -> dict[str, Any]:
        """Every aggregate of a type, folded, in first-appearance order."""
        return (await self.all_at(aggregate))[0]

    async def all_at(self, aggregate: Aggregate) -> tuple[dict[str, Any], int]:
        """Every aggregate of a type, folded, and the type's version (its last sequence; 0: none)."""
        records = await reading.read_subject_range(
            self.store.client,
            subjects.EVENTS_STREAM,
            subjects.aggregate_type_filter(aggregate),
            min_last_seq=self.store.last_sequence,
        )
        grouped: dict[str, list[RecordedEvent]] = {}
        for record in records:
            parsed = subjects.parse_event_subject(record.subject)
            if parsed is not None:
                grouped.setdefault(parsed[1], []).append(record)
        folded = {key: ev.fold(EVOLVE[aggregate], history) for key, history in grouped.items()}
        version = records[-1].sequence if records else 0
        return {key: state for key, state in folded.items() if state is not None}, version
