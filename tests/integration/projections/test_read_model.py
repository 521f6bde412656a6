"""As-of replays, unknown, foreign and unappliable events, the scheduler view, read-your-writes, swap."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

import msgspec
import psycopg
import pytest

from eventstore.store import EventStore, ExpectedVersion
from gateway.scheduler import DEFAULT_POLICY, GIB, AcceleratorState, Lease, ResidencyState, Resident, account
from modelforge.devstack.nats_server import NatsServer
from projections import digest, projector
from projections.migrate import migrate
from projections.replay import replay
from projections.wait import ProjectionWaiter, wait_for_sequence
from streams.events import control as c
from streams.events import serving as s
from streams.subjects import Aggregate
from tests.support.events import residency_loaded

from .helpers import accepted, checkpoints, migrated, project_until, publish, publish_raw


async def fetch(url: str, query: str, *params: object) -> list[tuple[object, ...]]:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute(query, params)
        return await cur.fetchall()


def client(cid: str) -> c.ClientCreated:
    return c.ClientCreated(
        client_id=cid, name=cid, scopes=("rag.embedding@1",), requests_per_minute=60, max_concurrency=2
    )


async def test_replay_until_a_sequence_or_a_time_gives_the_state_as_of_that_point(
    private_nats: NatsServer, private_store: EventStore, fresh_database: str
) -> None:
    store = private_store
    created = await store.append(Aggregate.CLIENT, "alice", [client("alice")], ExpectedVersion.NO_STREAM)
    await store.record_request("rag.embedding@1", "req-1", accepted("req-1"))
    await asyncio.sleep(0.01)  # let the server clock move past the first part (stored times are ns)
    cut = datetime.now(UTC)
    await asyncio.sleep(0.01)
    disabled = await store.append(
        Aggregate.CLIENT, "alice", [c.ClientDisabled(client_id="alice", reason="x")], created
    )
    await store.record_request("rag.embedding@1", "req-2", accepted("req-2"))
    await store.append(Aggregate.CLIENT, "bob", [client("bob")], ExpectedVersion.NO_STREAM)

    as_of_created = await replay(fresh_database, private_nats.url, until_seq=created, progress=False)
    schema = as_of_created.schema
    assert await fetch(fresh_database, f"SELECT client_id, enabled FROM {schema}.clients") == [
        ("alice", True)
    ]
    # MF_REQUESTS is cut at the time event `created` was stored: req-1 came later.
    assert await fetch(fresh_database, f"SELECT request_id FROM {schema}.requests") == []
    assert as_of_created.checkpoints == {"MF_EVENTS": created}

    as_of_disabled = await replay(fresh_database, private_nats.url, until_seq=disabled, progress=False)
    rows = await fetch(
        fresh_database, f"SELECT client_id, enabled, disabled_reason FROM {as_of_disabled.schema}.clients"
    )
    assert rows == [("alice", False, "x")]

    as_of_time = await replay(fresh_database, private_nats.url, until_time=cut, progress=False)
    assert as_of_time.checkpoints == {"MF_EVENTS": created, "MF_REQUESTS": 1}
    assert await fetch(fresh_database, f"SELECT request_id FROM {as_of_time.schema}.requests") == [("req-1",)]
    both = await replay(
        fresh_database, private_nats.url, until_seq=created, until_requests_seq=1, progress=False
    )
    assert both.digest == as_of_time.digest
    everything = await replay(fresh_database, private_nats.url, progress=False)
    rows = await fetch(
        fresh_database, f"SELECT client_id, enabled FROM {everything.schema}.clients ORDER BY 1"
    )
    assert rows == [("alice", False), ("bob", True)]


async def test_an_unknown_event_type_halts_the_projection_until_the_projector_is_upgraded(
    private_nats: NatsServer, private_store: EventStore, fresh_database: str
) -> None:
    # A gateway upgraded before the projector writes a type this projector does not know: skipping
    # it would move the checkpoint past it for good, so the upgraded projector could not apply it.
    before = await private_store.append(Aggregate.CLIENT, "bea", [client("bea")], ExpectedVersion.NO_STREAM)
    unknown = await publish_raw(
        private_store, "mf.evt.client.x.ClientTeleported", "ClientTeleported", b'{"to":"mars"}'
    )
    await private_store.append(Aggregate.CLIENT, "carol", [client("carol")], ExpectedVersion.NO_STREAM)
    with pytest.raises(
        projector.ProjectionHalted,
        match=f"MF_EVENTS sequence {unknown} \\(ClientTeleported\\): unknown event type: .*upgrade the projector",
    ):
        async with asyncio.timeout(30):
            await projector.run(fresh_database, private_nats.url, telemetry=False)
    assert (await checkpoints(fresh_database))["MF_EVENTS"] == before
    assert await fetch(fresh_database, "SELECT client_id FROM mf.clients") == [("bea",)]


async def test_a_message_without_an_envelope_is_recorded_and_the_projection_continues(
    private_nats: NatsServer, private_store: EventStore, fresh_database: str
) -> None:
    foreign = (
        await private_store.client.jetstream().publish("mf.evt.client.x.Graffiti", b'{"to":"mars"}')
    ).seq
    after = await private_store.append(Aggregate.CLIENT, "dora", [client("dora")], ExpectedVersion.NO_STREAM)
    await project_until(fresh_database, private_nats.url, {"MF_EVENTS": after})
    rows = await fetch(
        fresh_database,
        "SELECT seq, u.event_type, u.unknown_reason, a.payload FROM mf.unknown_events u"
        " JOIN mf.audit_log a USING (stream, seq)",
    )
    assert rows == [(foreign, "Graffiti", "missing or malformed envelope headers", {"to": "mars"})]
    assert await fetch(fresh_database, "SELECT client_id FROM mf.clients") == [("dora",)]


async def test_an_event_that_cannot_be_applied_stops_the_projection_naming_its_sequence(
    private_nats: NatsServer, private_store: EventStore, fresh_database: str
) -> None:
    before = await private_store.append(Aggregate.CLIENT, "dave", [client("dave")], ExpectedVersion.NO_STREAM)
    bad = await publish_raw(
        private_store, "mf.evt.client.dave.ClientDisabled", "ClientDisabled", b'{"nope":1}'
    )
    await private_store.append(Aggregate.CLIENT, "erin", [client("erin")], ExpectedVersion.NO_STREAM)
    with pytest.raises(
        projector.ProjectionHalted, match=f"MF_EVENTS sequence {bad} \\(ClientDisabled\\)"
    ) as halted:
        await asyncio.wait_for(projector.run(fresh_database, private_nats.url, telemetry=False), 30)
    assert halted.value.seq == bad
    assert (await checkpoints(fresh_database))["MF_EVENTS"] == before
    assert await fetch(fresh_database, "SELECT client_id, enabled FROM mf.clients") == [("dave", True)]


async def test_replay_stops_at_an_event_that_cannot_be_applied_naming_its_sequence(
    private_nats: NatsServer, private_store: EventStore, fresh_database: str
) -> None:
    await private_store.append(Aggregate.CLIENT, "fay", [client("fay")], ExpectedVersion.NO_STREAM)
    bad = await publish_raw(private_store, "mf.evt.client.fay.ClientDisabled", "ClientDisabled", b"[]")
    with pytest.raises(projector.ProjectionHalted, match=f"MF_EVENTS sequence {bad} \\(ClientDisabled\\)"):
        await replay(fresh_database, private_nats.url, schema="mf_halted", progress=False)
    assert await fetch(fresh_database, "SELECT client_id, enabled FROM mf_halted.clients") == [("fay", True)]


async def test_scheduler_view_matches_the_scheduler_accounting_for_a_scripted_sequence(
    private_nats: NatsServer, private_store: EventStore, fresh_database: str
) -> None:
    acc, node = "gpu0", "n1"
    expires = datetime(2030, 1, 1, tzinfo=UTC)

    def loaded(dep: str, measured: int) -> s.ResidencyLoaded:
        return residency_loaded(dep, acc, measured, deployment_id=dep)

    def lease(lid: str, size: int) -> s.LeaseGranted:
        return s.LeaseGranted(
            lease_id=lid,
            accelerator_id=acc,
            deployment_id="a",
            request_id=lid,
            client_id="c",
            reserved_bytes=size,
            expires_at=expires,
            decision_fingerprint="f",
        )

    script = [
        (
            Aggregate.NODE,
            node,
            c.NodeRegistered(
                node_id=node,
                hostname="h",
                hardware_fingerprint="fp",
                protocol_capabilities=(),
                runtimes=(),
                agent_version="1",
                accelerators=(
                    c.AcceleratorSpec(accelerator_id=acc, kind="gpu", name="H200", total_bytes=80 * GIB),
                ),
            ),
        ),
        (
            Aggregate.SCHEDULER_POLICY,
            "default",
            c.SchedulerPolicyRevised(revision=1, settings={"safety_reserve_fraction": 0.1}),
        ),
        (Aggregate.ACCELERATOR, acc, loaded("a", 10 * GIB)),
        (Aggregate.ACCELERATOR, acc, loaded("b", 6 * GIB)),
        (
            Aggregate.ACCELERATOR,
            acc,
            s.ResidencyUnloading(accelerator_id=acc, deployment_id="b", reason="eviction"),
        ),
        (
            Aggregate.ACCELERATOR,
            acc,
            s.ResidencyUnloaded(accelerator_id=acc, deployment_id="b", reclaimed_bytes=6 * GIB),
        ),
        (
            Aggregate.ACCELERATOR,
            acc,
            s.ResidencyLoadRequested(
                load_id="c", accelerator_id=acc, node_id=node, deployment_id="c", required_bytes=4 * GIB
            ),
        ),
        (
            Aggregate.ACCELERATOR,
            acc,
            s.ResidencyLoading(load_id="c", accelerator_id=acc, deployment_id="c", generation=1),
        ),
        (Aggregate.ACCELERATOR, acc, lease("l1", 2 * GIB)),
        (Aggregate.ACCELERATOR, acc, lease("l2", 1 * GIB)),
        (Aggregate.ACCELERATOR, acc, s.LeaseReleased(lease_id="l2", accelerator_id=acc, outcome="completed")),
        (Aggregate.ACCELERATOR, acc, lease("l3", 3 * GIB)),
    ]
    for aggregate, ident, event in script:
        last = await private_store.append(aggregate, ident, [event], ExpectedVersion.ANY)
    now_ms = int(time.time() * 1000)
    observation = {
        "node_id": node,
        "accelerator_id": acc,
        "total_bytes": 80 * GIB,
        "used_bytes": 25 * GIB,
        "observed_at_unix_ms": now_ms,
        "extra": "ignored",
    }
    await private_store.client.jetstream().publish(f"mf.tel.{node}.{acc}", msgspec.json.encode(observation))

    stop = asyncio.Event()
    task = asyncio.create_task(projector.run(fresh_database, private_nats.url, stop=stop))
    try:
        assert await wait_for_sequence(fresh_database, last, timeout=30)
        async with await psycopg.AsyncConnection.connect(fresh_database, autocommit=True) as conn:
            for _ in range(
                100
            ):  # telemetry arrives on its own consumer: wait for it by notification-free reads
                cur = await conn.execute("SELECT count(*) FROM mf.telemetry")
                if (await cur.fetchone()) == (1,):
                    break
                await asyncio.sleep(0.05)
            cur = await conn.execute(
                "SELECT total_bytes, observed_used_bytes, attribution, resident_bytes, leased_bytes, external_bytes,"
                " safety_reserve_bytes, committed_bytes, schedulable_bytes, utilisation FROM mf.scheduler_view"
            )
            row = await cur.fetchone()
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)

    policy = msgspec.structs.replace(DEFAULT_POLICY, safety_reserve_fraction=0.1)
    state = AcceleratorState(
        accelerator_id=acc,
        node_id=node,
        total_bytes=80 * GIB,
        observed_used_bytes=25 * GIB,
        observed_at=now_ms / 1000,
        residents=(
            Resident(deployment_id="a", measured_bytes=10 * GIB),
            Resident(deployment_id="c", measured_bytes=4 * GIB, state=ResidencyState.LOADING),
        ),
        leases=(
            Lease(lease_id="l1", deployment_id="a", reserved_bytes=2 * GIB),
            Lease(lease_id="l3", deployment_id="a", reserved_bytes=3 * GIB),
        ),
    )
    budget = account(state, policy, time.time())
    expected = (
        budget.total_bytes,
        budget.observed_used_bytes,
        budget.attribution.value,
        budget.resident_bytes,
        budget.leased_bytes,
        budget.external_bytes,
        budget.safety_reserve_bytes,
        budget.committed_bytes,
        budget.schedulable_bytes,
        pytest.approx(budget.utilisation),
    )
    assert row == expected
    # ... and by hand: resident 10+4, leased 2+3, external 25-14, reserve 10% of 80, committed 25+5.
    assert row == (
        80 * GIB,
        25 * GIB,
        "KNOWN",
        14 * GIB,
        5 * GIB,
        11 * GIB,
        8 * GIB,
        30 * GIB,
        42 * GIB,
        pytest.approx(30 / 80),
    )


async def test_read_your_writes_wakes_when_the_sequence_is_applied(
    private_nats: NatsServer, private_store: EventStore, fresh_database: str
) -> None:
    await migrated(fresh_database)
    waiter = await ProjectionWaiter.open(fresh_database)
    stop = asyncio.Event()
    task = asyncio.create_task(projector.run(fresh_database, private_nats.url, stop=stop, telemetry=False))
    try:
        seq = await private_store.append(
            Aggregate.CLIENT, "frank", [client("frank")], ExpectedVersion.NO_STREAM
        )
        assert await waiter.wait(seq, timeout=30)
        assert await fetch(fresh_database, "SELECT client_id FROM mf.clients") == [("frank",)]
        assert not await waiter.wait(seq + 1, timeout=0.2)
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
        await waiter.close()


async def test_swap_makes_a_replay_live_and_the_running_projector_follows_it(
    private_nats: NatsServer, private_store: EventStore, fresh_database: str
) -> None:
    first = await publish(private_store, [(Aggregate.CLIENT, f"g{i}", client(f"g{i}")) for i in range(20)])
    stop = asyncio.Event()
    task = asyncio.create_task(projector.run(fresh_database, private_nats.url, stop=stop, telemetry=False))
    waiter = await ProjectionWaiter.open(fresh_database)
    try:
        assert await waiter.wait(first["MF_EVENTS"], timeout=30)
        swapped = await replay(fresh_database, private_nats.url, until_seq=10, swap=True, progress=False)
        assert swapped.swapped_out is not None
        more = await publish(private_store, [(Aggregate.CLIENT, f"h{i}", client(f"h{i}")) for i in range(5)])
        assert await waiter.wait(more["MF_EVENTS"], timeout=30)
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
        await waiter.close()
    assert await fetch(fresh_database, "SELECT count(*) FROM mf.clients") == [(25,)]
    async with await psycopg.AsyncConnection.connect(fresh_database, autocommit=True) as conn:
        live = await digest.digest(conn, "mf")
    assert (await replay(fresh_database, private_nats.url, progress=False)).digest == live


async def test_migrations_are_recorded_and_idempotent(fresh_database: str) -> None:
    async with await psycopg.AsyncConnection.connect(fresh_database, autocommit=True) as conn:
        first = await migrate(conn, "mf")
        again = await migrate(conn, "mf")
        cur = await conn.execute("SELECT version, name FROM mf.schema_migrations ORDER BY 1")
        assert await cur.fetchall() == [
            (1, "read_model"),
            (2, "views"),
            (3, "agent_jobs"),
            (4, "lean_audit_log"),
            (5, "request_history_indexes"),
            (6, "projection_gaps"),
            (7, "migration_checksums"),
            (8, "approval_approver"),
            (9, "approval_last_approver"),
            (10, "probe_weights"),
            (11, "projection_halts"),
            (12, "node_lost"),
            (13, "placement_refusals"),
            (14, "deployment_replicas"),
            (15, "node_credentials"),
            (16, "request_trace_id"),
            (17, "canary_releases"),
            (18, "deployment_caps"),
            (19, "reference_fields"),
            (20, "request_finished_at"),
            (21, "worker_memory"),
            (22, "request_standby_lease"),
            (23, "request_accepted_by"),
        ]
    assert first == list(range(1, 24))
    assert again == []
