"""Appending: optimistic concurrency, atomic batches, safe retries, bad input."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from eventstore.connection import connect
from eventstore.errors import ConcurrencyConflict, EventRejected
from eventstore.provision import provision
from eventstore.store import EventStore, ExpectedVersion, prepare
from modelforge.devstack.nats_server import start_nats
from modelforge.devstack.processes import stop_pid
from streams import subjects
from streams.envelope import SYSTEM, new_id
from streams.events.control import ClientCreated, ClientDisabled, ClientEnabled, NodeEnabled
from streams.subjects import Aggregate, InvalidSubjectToken


def created(client_id: str) -> ClientCreated:
    return ClientCreated(
        client_id=client_id,
        name="app",
        scopes=("rag.embedding@1",),
        requests_per_minute=60,
        max_concurrency=4,
    )


async def test_create_then_load_returns_the_event_and_its_version(store: EventStore) -> None:
    cid = new_id()
    version = await store.append(Aggregate.CLIENT, cid, [created(cid)], ExpectedVersion.NO_STREAM)
    records, loaded_version = await store.load(Aggregate.CLIENT, cid)
    assert loaded_version == version
    assert [r.event for r in records] == [created(cid)]


async def test_prepared_envelopes_are_the_ones_stored(store: EventStore) -> None:
    # A writer folds its own acknowledged events with these envelopes instead of reading them back.
    cid = new_id()
    outgoing = prepare(
        [created(cid), ClientDisabled(client_id=cid)], Aggregate.CLIENT, cid, SYSTEM, "c-1", None
    )
    await store.append_prepared(Aggregate.CLIENT, cid, outgoing, ExpectedVersion.NO_STREAM)
    records, _ = await store.load(Aggregate.CLIENT, cid)
    assert [r.envelope for r in records] == [o.envelope for o in outgoing]
    assert [r.subject for r in records] == [o.subject for o in outgoing]


async def test_creating_an_existing_aggregate_conflicts(store: EventStore) -> None:
    cid = new_id()
    version = await store.append(Aggregate.CLIENT, cid, [created(cid)], ExpectedVersion.NO_STREAM)
    with pytest.raises(ConcurrencyConflict) as info:
        await store.append(Aggregate.CLIENT, cid, [created(cid)], ExpectedVersion.NO_STREAM)
    assert info.value.actual == version


async def test_concurrent_appends_win_each_version_exactly_once(store: EventStore) -> None:
    cid = new_id()
    await store.append(Aggregate.CLIENT, cid, [created(cid)], ExpectedVersion.NO_STREAM)
    conflicts = 0

    async def writer(n: int) -> int:
        nonlocal conflicts
        while True:
            _, version = await store.load(Aggregate.CLIENT, cid)
            event = ClientDisabled(client_id=cid, reason=f"writer-{n}")
            try:
                return await store.append(Aggregate.CLIENT, cid, [event], version)
            except ConcurrencyConflict as exc:
                assert exc.actual > version
                conflicts += 1

    versions = await asyncio.gather(*(writer(n) for n in range(24)))
    records, final = await store.load(Aggregate.CLIENT, cid)
    assert len(set(versions)) == 24
    assert final == max(versions)
    reasons = sorted(r.event.reason for r in records[1:] if isinstance(r.event, ClientDisabled))
    assert reasons == sorted(f"writer-{n}" for n in range(24))
    assert conflicts > 0


async def test_a_batch_is_stored_whole_with_consecutive_versions(store: EventStore) -> None:
    cid = new_id()
    events = [created(cid), ClientDisabled(client_id=cid), ClientEnabled(client_id=cid)]
    version = await store.append(Aggregate.CLIENT, cid, events, ExpectedVersion.NO_STREAM)
    records, loaded = await store.load(Aggregate.CLIENT, cid)
    assert [r.event for r in records] == events
    assert loaded == version
    assert [r.sequence for r in records] == [version - 2, version - 1, version]


async def test_a_batch_with_a_stale_expectation_stores_nothing(store: EventStore) -> None:
    cid = new_id()
    first = await store.append(Aggregate.CLIENT, cid, [created(cid)], ExpectedVersion.NO_STREAM)
    await store.append(Aggregate.CLIENT, cid, [ClientDisabled(client_id=cid)], first)
    with pytest.raises(ConcurrencyConflict):
        await store.append(
            Aggregate.CLIENT, cid, [ClientEnabled(client_id=cid), ClientDisabled(client_id=cid)], first
        )
    records, _ = await store.load(Aggregate.CLIENT, cid)
    assert len(records) == 2


async def test_resending_the_same_append_after_it_landed_does_not_duplicate(store: EventStore) -> None:
    cid = new_id()
    outgoing = prepare(
        [created(cid), ClientDisabled(client_id=cid)], Aggregate.CLIENT, cid, SYSTEM, None, None
    )
    first = await store.append_prepared(Aggregate.CLIENT, cid, outgoing, ExpectedVersion.NO_STREAM)
    again = await store.append_prepared(Aggregate.CLIENT, cid, outgoing, ExpectedVersion.NO_STREAM)
    records, _ = await store.load(Aggregate.CLIENT, cid)
    assert again == first
    assert len(records) == 2


async def test_an_ambiguous_publish_is_retried_without_duplicating(tmp_path: Path) -> None:
    # A frozen server (SIGSTOP) takes the publish but cannot answer in time: the outcome is unknown.
    os.chmod(tmp_path, 0o755)
    server = start_nats(tmp_path)
    conn = await connect(server.url, "ambiguous")
    try:
        await provision(conn.client)
        store = EventStore(conn, publish_timeout=0.5, retry_s=5)
        cid = new_id()
        await store.append(Aggregate.CLIENT, cid, [created(cid)], ExpectedVersion.NO_STREAM)
        os.kill(server.pid, signal.SIGSTOP)
        loop = asyncio.get_running_loop()
        loop.call_later(0.7, os.kill, server.pid, signal.SIGCONT)
        version = store.last_sequence
        appended = await store.append(Aggregate.CLIENT, cid, [ClientDisabled(client_id=cid)], version)
        records, final = await store.load(Aggregate.CLIENT, cid)
        assert appended == final
        assert [type(r.event) for r in records] == [ClientCreated, ClientDisabled]
    finally:
        await conn.close()
        stop_pid(server.pid)


async def test_any_expected_version_appends_without_a_check(store: EventStore) -> None:
    cid = new_id()
    await store.append(Aggregate.CLIENT, cid, [created(cid)], ExpectedVersion.ANY)
    await store.append(Aggregate.CLIENT, cid, [ClientDisabled(client_id=cid)], ExpectedVersion.ANY)
    records, _ = await store.load(Aggregate.CLIENT, cid)
    assert len(records) == 2


async def test_loading_an_aggregate_with_thousands_of_events_returns_all_in_order(store: EventStore) -> None:
    nid = new_id()
    version = 0
    for _ in range(30):
        batch = [NodeEnabled(node_id=nid) for _ in range(100)]
        version = await store.append(Aggregate.NODE, nid, batch, version or ExpectedVersion.NO_STREAM)
    records, loaded = await store.load(Aggregate.NODE, nid)
    assert len(records) == 3_000
    assert loaded == version
    assert [r.sequence for r in records] == sorted(r.sequence for r in records)


async def test_an_unknown_aggregate_type_is_rejected_before_publishing(store: EventStore) -> None:
    before = store.last_sequence
    with pytest.raises(InvalidSubjectToken, match="unknown aggregate type"):
        await store.append("spaceship", "x", [created("x")], ExpectedVersion.ANY)
    assert store.last_sequence == before


@pytest.mark.parametrize("bad_id", ["a.b", "a*", ">", "has space", "", "x" * 200])
async def test_an_id_that_is_not_one_subject_token_is_rejected(store: EventStore, bad_id: str) -> None:
    with pytest.raises(InvalidSubjectToken):
        await store.append(Aggregate.CLIENT, bad_id, [created("x")], ExpectedVersion.ANY)


async def test_an_event_of_another_aggregate_is_rejected(store: EventStore) -> None:
    with pytest.raises(EventRejected, match="does not belong"):
        await store.append(Aggregate.NODE, new_id(), [created("x")], ExpectedVersion.ANY)


async def test_a_payload_that_is_not_an_event_is_rejected(store: EventStore) -> None:
    with pytest.raises(EventRejected, match="not an event"):
        await store.append(Aggregate.CLIENT, new_id(), [{"type": "ClientCreated"}], ExpectedVersion.ANY)  # type: ignore[list-item]


async def test_an_oversized_event_is_rejected(store: EventStore) -> None:
    cid = new_id()
    huge = ClientDisabled(client_id=cid, reason="x" * 300_000)
    with pytest.raises(EventRejected, match="limited"):
        await store.append(Aggregate.CLIENT, cid, [huge], ExpectedVersion.ANY)
    records, _ = await store.load(Aggregate.CLIENT, cid)
    assert records == []


async def test_an_append_scoped_to_a_type_conflicts_with_a_change_to_any_aggregate_of_it(
    store: EventStore,
) -> None:
    # A decision over every aggregate of a type (one stable deployment per capability) expects
    # the type's version: a change to another aggregate of the type since is a conflict.
    every_client = subjects.aggregate_type_filter(Aggregate.CLIENT)
    first, second = new_id(), new_id()
    seen = await store.append(Aggregate.CLIENT, first, [created(first)], ExpectedVersion.NO_STREAM)
    moved = await store.append(Aggregate.CLIENT, first, [ClientDisabled(client_id=first)], seen)
    with pytest.raises(ConcurrencyConflict):
        await store.append(Aggregate.CLIENT, second, [created(second)], seen, scope=every_client)
    assert (await store.load(Aggregate.CLIENT, second))[0] == []
    await store.append(Aggregate.CLIENT, second, [created(second)], moved, scope=every_client)
    assert [r.event for r in (await store.load(Aggregate.CLIENT, second))[0]] == [created(second)]


async def test_asking_mf_events_whether_it_has_a_leader_stores_nothing_and_finds_one(
    store: EventStore,
) -> None:
    js = store.client.jetstream()
    before = (await js.stream_info(subjects.EVENTS_STREAM)).state.last_seq
    store.leaderless.set()
    await store.probe_leader()
    assert not store.leaderless.is_set()
    assert (await js.stream_info(subjects.EVENTS_STREAM)).state.last_seq == before
