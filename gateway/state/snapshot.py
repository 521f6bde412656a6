"""A snapshot of the live view's folded state: what MF_EVENTS up to one sequence made of it. Pure.

A gateway starts from the latest snapshot and folds only the events after its sequence, so start-up
costs O(state + tail), not O(history) (docs/event-log.md, "Snapshots of the live view"). Only what
the events alone decide is kept: telemetry (observed memory, cached sets) is read again at start,
and this replica's staged decisions are its own. A snapshot names the fold it was made by
(`FOLD_VERSION`, a hash of the code that folds): any change to that code invalidates every older
snapshot, which then costs one full fold instead of a wrong view.
"""

from __future__ import annotations

import hashlib
import importlib
from functools import cache
from pathlib import Path

import msgspec

from gateway.scheduler import AcceleratorState, CoResidencyPair, SchedulerPolicy
from gateway.state.catalog import Catalog
from gateway.state.evictions import PendingEviction
from gateway.state.live import LiveState
from gateway.state.loads import LoadFailure, Outgrown, PendingLoad
from streams import subjects
from streams.events import serving as s
from streams.events.identity import ForgedEventRefused

# The modules whose code decides what a fold makes of the events (and the shape it is kept in).
_FOLD_MODULES = (
    "gateway.state.live",
    "gateway.state.accelerators",
    "gateway.state.catalog",
    "gateway.state.evictions",
    "gateway.state.loads",
    "gateway.state.senders",
    "gateway.state.snapshot",
    "gateway.deployments.evolve",
    "gateway.deployments.model",
    "gateway.scheduler.state",
    "gateway.scheduler.policy",
    "gateway.scheduler.decision",
    "streams.codec",
    "streams.envelope",
    "streams.events.base",
    "streams.events.control",
    "streams.events.serving",
    "streams.events.identity",
    "streams.events.upcasters",
)


class Forged(msgspec.Struct, frozen=True, array_like=True):
    """An MF_EVENTS message refused as forged and not yet recorded as such."""

    subject: str
    sequence: int
    refused: ForgedEventRefused


class LiveSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    catalog: Catalog
    policy: SchedulerPolicy
    accelerators: dict[str, AcceleratorState]
    versions: dict[str, int]
    node_versions: dict[str, int]
    load_failures: dict[str, LoadFailure]
    co_residency: tuple[CoResidencyPair, ...]
    unhealthy: dict[str, str]
    lease_grants: dict[str, s.LeaseGranted]
    evictions: dict[str, PendingEviction]
    loads: dict[str, PendingLoad]
    outgrown: dict[str, Outgrown]
    forged: tuple[Forged, ...]


class SnapshotRecord(msgspec.Struct, frozen=True, kw_only=True):
    """What the bucket holds: the state (encoded), the sequence it includes, its digest, its fold."""

    fold_version: str
    sequence: int
    # The id of the event stored at `sequence`: a log restored or replaced under the snapshot no
    # longer holds it there, and the snapshot is then not used.
    event_id: str
    digest: str  # sha256 of `state`
    state: bytes


class SnapshotUnusable(ValueError):
    """A stored snapshot that must not be started from (the reason says why)."""


_encoder = msgspec.msgpack.Encoder(order="deterministic")  # (a digest must not depend on dict order)
_state_decoder = msgspec.msgpack.Decoder(LiveSnapshot)
_record_decoder = msgspec.msgpack.Decoder(SnapshotRecord)


@cache
def fold_version() -> str:
    """A hash of the fold's code: a snapshot made by other code is not used."""
    digest = hashlib.sha256()
    for name in _FOLD_MODULES:
        source = importlib.import_module(name).__file__
        assert source is not None
        digest.update(name.encode() + b"\0" + Path(source).read_bytes())
    return digest.hexdigest()[:32]


def capture(live: LiveState) -> LiveSnapshot:
    """The view's folded state (its acknowledged books; telemetry and staged events left out)."""
    return LiveSnapshot(
        catalog=live.catalog,
        policy=live.policy,
        accelerators={acc_id: _without_telemetry(state) for acc_id, state in live.accelerators.items()},
        versions=dict(live.versions),
        node_versions=dict(live.node_versions),
        load_failures=dict(live.load_failures),
        co_residency=live.co_residency,
        unhealthy=dict(live.unhealthy),
        lease_grants=dict(live.lease_grants),
        evictions=dict(live.evictions),
        loads=dict(live.loads),
        outgrown=dict(live.outgrown),
        forged=tuple(
            Forged(subject, sequence, refused)
            for (subject, sequence), refused in live.forged.items()
            if subject.startswith(subjects.EVENTS_PREFIX + ".")  # (telemetry's are read again)
        ),
    )


def restore(live: LiveState, snapshot: LiveSnapshot, sequence: int) -> None:
    """Put a snapshot into a view that has folded nothing yet; it then follows from `sequence` + 1."""
    if live.applied:
        raise RuntimeError("a snapshot is restored only into a view that has folded nothing")
    live.catalog, live.policy = snapshot.catalog, snapshot.policy
    live.accelerators = dict(snapshot.accelerators)
    live.versions, live.node_versions = dict(snapshot.versions), dict(snapshot.node_versions)
    live.load_failures = dict(snapshot.load_failures)
    live.co_residency = snapshot.co_residency
    live.unhealthy = dict(snapshot.unhealthy)
    live.lease_grants = dict(snapshot.lease_grants)
    live.evictions, live.loads = dict(snapshot.evictions), dict(snapshot.loads)
    live.outgrown = dict(snapshot.outgrown)
    live.forged = {(item.subject, item.sequence): item.refused for item in snapshot.forged}
    live.applied = live.followed = sequence


def _without_telemetry(state: AcceleratorState) -> AcceleratorState:
    """The accelerator's books as the events alone make them: no observed memory, cached sets or
    workers' memory (telemetry's; a replay of the log has none of it)."""
    residents = tuple(
        msgspec.structs.replace(r, worker_bytes=0) if r.worker_bytes else r for r in state.residents
    )
    return msgspec.structs.replace(
        state, observed_used_bytes=None, observed_at=None, cached_sets=(), residents=residents
    )


def encode_state(snapshot: LiveSnapshot) -> bytes:
    """Canonical bytes: encoded once more after decoding, so that a value the view holds as built
    by code (an int in a float field, say) and one decoded from the log encode alike."""
    return _encoder.encode(_state_decoder.decode(_encoder.encode(snapshot)))


def digest_of(state: bytes) -> str:
    return hashlib.sha256(state).hexdigest()


def record_of(snapshot: LiveSnapshot, sequence: int, event_id: str) -> SnapshotRecord:
    state = encode_state(snapshot)
    return SnapshotRecord(
        fold_version=fold_version(),
        sequence=sequence,
        event_id=event_id,
        digest=digest_of(state),
        state=state,
    )


def encode_record(record: SnapshotRecord) -> bytes:
    return _encoder.encode(record)


def open_record(data: bytes) -> tuple[SnapshotRecord, LiveSnapshot]:
    """The record and its state, or SnapshotUnusable: undecodable, made by another fold, or not
    what its digest says."""
    try:
        record = _record_decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as error:
        raise SnapshotUnusable(f"undecodable: {error}") from None
    if record.fold_version != fold_version():
        raise SnapshotUnusable(f"made by another fold ({record.fold_version}, this one {fold_version()})")
    if digest_of(record.state) != record.digest:
        raise SnapshotUnusable("its state does not match its digest")
    try:
        return record, _state_decoder.decode(record.state)
    except (msgspec.DecodeError, msgspec.ValidationError) as error:
        raise SnapshotUnusable(f"undecodable state: {error}") from None
