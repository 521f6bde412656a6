"""Snapshots of the live view: a gateway starts from the latest and folds only the events after it;
a capture that disagrees with a replay of the log is never stored, and a stored snapshot that is
not usable (another fold's, not what its digest says, or made on another log) is ignored for a
full fold."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import msgspec
import pytest

from eventstore.connection import Connection
from eventstore.records import RecordedEvent
from eventstore.store import EventStore, ExpectedVersion, prepare
from gateway.state.live import LiveState
from gateway.state.snapshot import (
    SnapshotRecord,
    capture,
    encode_record,
    encode_state,
    open_record,
    record_of,
)
from gateway.state.snapshots import KEY, SnapshotWriter, read_snapshot, start_live
from streams import subjects
from streams.envelope import H_MSG_ID, SYSTEM
from streams.events import control as c
from streams.events import serving as s
from streams.messages import AcceleratorTelemetry, WorkerMemory
from tests.support.events import lease_granted, residency_loaded

ACC = "n1-cpu0"
WAIT_S = 30.0  # a bound on a wait that ends as soon as what it waits for happens


class CountingView(LiveState):
    """A live view that counts the events it folds."""

    def __init__(self) -> None:
        super().__init__()
        self.folded = 0

    def apply(self, record: RecordedEvent, own: bool = False) -> None:
        self.folded += 1
        super().apply(record, own)


async def lease_traffic(store: EventStore, requests: int) -> None:
    """`requests` leases granted and released on one accelerator, as serving appends them."""
    expires = datetime.now(UTC) + timedelta(minutes=5)
    for n in range(requests):
        lease_id = f"lease-{uuid.uuid4().hex[:12]}"
        for event in (
            lease_granted(lease_id, ACC, expires),
            s.LeaseReleased(lease_id=lease_id, accelerator_id=ACC, outcome="completed"),
        ):
            await store.append(subjects.Aggregate.ACCELERATOR, ACC, [event], ExpectedVersion.ANY)
        if n == requests // 2:  # one left held, so the books are not empty
            await store.append(
                subjects.Aggregate.ACCELERATOR,
                ACC,
                [lease_granted("held", ACC, expires)],
                ExpectedVersion.ANY,
            )


async def history(store: EventStore, requests: int) -> None:
    await store.append(subjects.Aggregate.NODE, "n1", [registration("n1", ACC)], ExpectedVersion.ANY)
    loaded = residency_loaded("load-1", ACC, 1 << 28)
    await store.append(subjects.Aggregate.ACCELERATOR, ACC, [loaded], ExpectedVersion.ANY)
    await lease_traffic(store, requests)


async def started(conn: Connection, view: LiveState, from_snapshot: bool = True) -> int:
    if from_snapshot:
        return await start_live(conn.client, view)
    await view.start(conn.client)
    return 0


def digest(view: LiveState) -> bytes:
    return encode_state(capture(view))


async def put_snapshot(conn: Connection, data: bytes) -> None:
    bucket = await conn.client.jetstream().key_value(subjects.SNAPSHOTS_BUCKET)
    await bucket.put(KEY, data)


async def full_and_resumed(conn: Connection) -> tuple[CountingView, CountingView, int]:
    resumed, full = CountingView(), CountingView()
    after = await started(conn, resumed)
    await started(conn, full, from_snapshot=False)
    return resumed, full, after


async def test_a_view_started_from_a_snapshot_folds_only_the_tail_and_equals_a_full_fold(
    private_store: EventStore,
) -> None:
    store, conn = private_store, private_store.connection
    await history(store, 30)
    writer_view = LiveState()
    await writer_view.start(conn.client)
    assert await SnapshotWriter(conn.client, writer_view).write()
    await writer_view.stop()
    await lease_traffic(store, 3)
    resumed, full, after = await full_and_resumed(conn)
    try:
        assert after == writer_view.applied
        assert (resumed.folded, full.folded) == (full.applied - after, full.applied)
        assert digest(resumed) == digest(full)
        assert resumed.holds_lease(ACC, "held")
    finally:
        await resumed.stop()
        await full.stop()


def registration(node_id: str, accelerator_id: str) -> c.NodeRegistered:
    return c.NodeRegistered(
        node_id=node_id, hostname="h", hardware_fingerprint="hw",
        accelerators=(c.AcceleratorSpec(accelerator_id, "cpu", "cpu", 1 << 34),),
        protocol_capabilities=(), runtimes=("onnxruntime-cpu",), agent_version="1",
    )  # fmt: skip


async def test_a_refused_forgery_the_upkeep_recorded_does_not_stop_a_snapshot(
    private_store: EventStore,
) -> None:
    store, conn = private_store, private_store.connection
    await history(store, 2)
    # Node n2's subject, but the payload speaks for node n1: refused as forged, then recorded by the
    # upkeep, which drops it from the view before the log delivers the record back.
    await store.append(subjects.Aggregate.NODE, "n2", [registration("n1", "n2-cpu0")], ExpectedVersion.ANY)
    view = LiveState()
    try:
        await view.start(conn.client)
        (refused,) = view.forged
        view.forged.pop(refused)
        assert await SnapshotWriter(conn.client, view).write()
        stored = await read_snapshot(conn.client)
        assert stored is not None
        assert [(item.subject, item.sequence) for item in stored[1].forged] == [refused]  # the log's
    finally:
        await view.stop()


async def test_a_view_that_heard_its_workers_memory_in_telemetry_still_stores_a_snapshot(
    private_store: EventStore,
) -> None:
    await history(private_store, 2)
    view = LiveState()
    try:
        await view.start(private_store.connection.client)
        view.apply_telemetry(  # as the node's agent reports it with every round, once a model is loaded
            AcceleratorTelemetry(
                node_id="n1", accelerator_id=ACC, generation=1, total_bytes=1 << 34, used_bytes=1 << 30,
                process_bytes=1 << 29, observed_at_unix_ms=1, residencies=[], healthy=True,
                workers=[WorkerMemory(deployment_id="emb", bytes=300 << 20)],
            )
        )  # fmt: skip
        writer = SnapshotWriter(private_store.connection.client, view)
        assert (await writer.write(), writer.refused) == (True, 0)
    finally:
        await view.stop()


async def test_a_capture_that_disagrees_with_a_replay_of_the_log_is_not_stored(
    private_store: EventStore,
) -> None:
    store, conn = private_store, private_store.connection
    await history(store, 10)
    view = LiveState()
    try:
        await view.start(conn.client)
        # A view gone wrong (a fold that differs from the log's): it thinks the accelerator is smaller.
        view.accelerators[ACC] = msgspec.structs.replace(view.accelerators[ACC], total_bytes=1)
        writer = SnapshotWriter(conn.client, view)
        assert (await writer.write(), writer.refused) == (False, 1)
        assert await read_snapshot(conn.client) is None
    finally:
        await view.stop()


Doctor = Callable[[LiveState, SnapshotRecord], SnapshotRecord]


async def ignored_for_a_full_fold(conn: Connection, doctored: Doctor) -> None:
    """Store `doctored(view, honest)`, where `honest` is a true snapshot of `view`, a view of the
    log; then start one from it beside a full fold: it must have folded everything itself, and
    hold what the full fold holds."""
    view = LiveState()
    await view.start(conn.client)
    at = await conn.client.jetstream().get_msg(subjects.EVENTS_STREAM, seq=view.applied, direct=True)
    honest = record_of(capture(view), view.applied, (at.headers or {})[H_MSG_ID])
    data = encode_record(doctored(view, honest))
    await view.stop()
    await put_snapshot(conn, data)
    resumed, full, after = await full_and_resumed(conn)
    try:
        assert (after, resumed.folded) == (0, full.folded)
        assert digest(resumed) == digest(full)
    finally:
        await resumed.stop()
        await full.stop()


def unlike_its_digest(view: LiveState, honest: SnapshotRecord) -> SnapshotRecord:
    view.accelerators[ACC] = msgspec.structs.replace(view.accelerators[ACC], total_bytes=1)
    return msgspec.structs.replace(honest, state=encode_state(capture(view)))


def of_another_fold(view: LiveState, honest: SnapshotRecord) -> SnapshotRecord:
    return msgspec.structs.replace(honest, fold_version="an-older-fold")


def of_another_log(view: LiveState, honest: SnapshotRecord) -> SnapshotRecord:
    """As if MF_EVENTS had been restored from an older backup and grown again since."""
    return msgspec.structs.replace(honest, event_id="an-event-this-log-does-not-hold-there")


@pytest.mark.parametrize("doctored", [unlike_its_digest, of_another_fold, of_another_log])
async def test_a_stored_snapshot_that_is_not_usable_is_ignored_for_a_full_fold(
    private_store: EventStore, doctored: Doctor
) -> None:
    await history(private_store, 10)
    await ignored_for_a_full_fold(private_store.connection, doctored)


async def test_a_gateway_whose_only_events_are_its_own_stores_a_snapshot_once_their_echoes_arrive(
    private_store: EventStore,
) -> None:
    store, conn = private_store, private_store.connection
    await history(store, 2)
    view = LiveState()
    await view.start(conn.client)
    writer = SnapshotWriter(conn.client, view, every=3)
    bucket = await conn.client.jetstream().key_value(subjects.SNAPSHOTS_BUCKET)
    watcher = await bucket.watch(KEY)
    try:
        assert await watcher.updates(timeout=WAIT_S) is None  # (nothing stored yet)
        writer.start()
        expires = datetime.now(UTC) + timedelta(minutes=5)
        for n in range(3):  # appended and folded as the serving writer does: on acknowledgement
            event = lease_granted(f"own-{n}", ACC, expires)
            expected = view.versions[ACC]
            outgoing = prepare([event], subjects.Aggregate.ACCELERATOR, ACC, SYSTEM, None, None)
            version = await store.append_prepared(subjects.Aggregate.ACCELERATOR, ACC, outgoing, expected)
            view.apply_own(RecordedEvent(version, outgoing[0].subject, outgoing[0].envelope, event), expected)
            await view.notify()
        stored = await watcher.updates(timeout=WAIT_S)  # (stored once the last echo is delivered)
        assert open_record(stored.value)[0].sequence == view.applied
    finally:
        await watcher.stop()
        await writer.close()
        await view.stop()
