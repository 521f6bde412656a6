"""A production approval's row names who approved it and why, as its event recorded them; rows
projected before those columns existed get them from the audit log's copy of the event."""

from __future__ import annotations

import psycopg
import pytest

from eventstore.store import EventStore, ExpectedVersion
from modelforge.devstack.nats_server import NatsServer
from projections import digest
from projections.migrate import migrate
from projections.replay import replay
from streams.events import control as c
from streams.subjects import Aggregate

from .helpers import migrated, project_until, projected

APPROVED = c.ProductionApproved(
    approval_id="appr-1",
    candidate_id="cand-1",
    evidence_fingerprint="f" * 64,
    evidence={"probe_id": "p1"},
    approved_by="dana",
    reason="load test passed on n1",
)
# Recorded before the admin API required an approver and a reason.
OLDER = c.ProductionApproved(
    approval_id="appr-0", candidate_id="cand-0", evidence_fingerprint="e" * 64, evidence={}
)


async def approvals(
    conn: psycopg.AsyncConnection[tuple[object, ...]], schema: str = "mf"
) -> list[tuple[object, ...]]:
    cur = await conn.execute(
        f"SELECT approval_id, approved_by, approval_reason FROM {schema}.approvals ORDER BY 1"
    )
    return await cur.fetchall()


async def project_approvals(store: EventStore, database_url: str, nats_url: str) -> None:
    items = [(Aggregate.APPROVAL, "appr-0", OLDER), (Aggregate.APPROVAL, "appr-1", APPROVED)]
    await projected(store, database_url, nats_url, items)


async def test_a_production_approval_row_names_its_approver_and_reason(
    private_nats: NatsServer, private_store: EventStore, fresh_database: str
) -> None:
    await project_approvals(private_store, fresh_database, private_nats.url)
    async with await psycopg.AsyncConnection.connect(fresh_database, autocommit=True) as conn:
        assert await approvals(conn) == [("appr-0", "", ""), ("appr-1", "dana", "load test passed on n1")]


async def test_rows_projected_before_the_columns_existed_are_filled_from_the_audit_log(
    private_nats: NatsServer, private_store: EventStore, fresh_database: str
) -> None:
    await project_approvals(private_store, fresh_database, private_nats.url)
    async with await psycopg.AsyncConnection.connect(fresh_database, autocommit=True) as conn:
        # As a schema projected by a build without 008 left it.
        await conn.execute("DELETE FROM mf.schema_migrations WHERE version IN (8, 9)")
        await conn.execute("ALTER TABLE mf.approvals DROP COLUMN approved_by, DROP COLUMN approval_reason")
        assert await migrate(conn, "mf") == [8, 9]
        assert await approvals(conn) == [("appr-0", "", ""), ("appr-1", "dana", "load test passed on n1")]
        live = await digest.digest(conn, "mf")
    rebuilt = await replay(fresh_database, private_nats.url, progress=False)
    assert rebuilt.digest == live


REAPPROVED = [
    c.ProductionApproved(
        approval_id="appr-2", candidate_id="cand-2", evidence_fingerprint="d" * 64, evidence={},
        approved_by="dana", reason="first look",
    ),
    c.ApprovalMarkedStale(approval_id="appr-2", changed_facts=("probe_id",)),
    # The same facts approved again once they are back: the same approval, approved anew.
    c.ProductionApproved(
        approval_id="appr-2", candidate_id="cand-2", evidence_fingerprint="d" * 64, evidence={},
        approved_by="erin", reason="the facts are back",
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    "history",
    ["projected before 008", "migrated by the first 008"],
)
async def test_a_row_approved_again_names_its_last_approval_as_a_replay_does(
    private_nats: NatsServer, private_store: EventStore, fresh_database: str, history: str
) -> None:
    last = await private_store.append(Aggregate.APPROVAL, "appr-2", REAPPROVED, ExpectedVersion.NO_STREAM)
    await migrated(fresh_database)
    await project_until(fresh_database, private_nats.url, {"MF_EVENTS": last})
    async with await psycopg.AsyncConnection.connect(fresh_database, autocommit=True) as conn:
        assert await approvals(conn) == [("appr-2", "erin", "the facts are back")]
        if history == "projected before 008":
            await conn.execute("DELETE FROM mf.schema_migrations WHERE version IN (8, 9)")
            await conn.execute(
                "ALTER TABLE mf.approvals DROP COLUMN approved_by, DROP COLUMN approval_reason"
            )
        else:  # 008 filled the row from the first of the approval's events
            await conn.execute("DELETE FROM mf.schema_migrations WHERE version = 9")
            await conn.execute("UPDATE mf.approvals SET approved_by = 'dana', approval_reason = 'first look'")
        await migrate(conn, "mf")
        assert await approvals(conn) == [("appr-2", "erin", "the facts are back")]
        live = await digest.digest(conn, "mf")
    rebuilt = await replay(fresh_database, private_nats.url, progress=False)
    assert rebuilt.digest == live
