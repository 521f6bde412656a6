"""An event holding text PostgreSQL cannot store (a NUL), recorded before the command edge refused
such text or by another writer, is projected all the same (NUL stored as U+FFFD), and a replay
rebuilds the same digest."""

from __future__ import annotations

import psycopg

from eventstore.store import EventStore, ExpectedVersion
from modelforge.devstack.nats_server import NatsServer
from projections.replay import replay
from streams.events import control as c
from streams.subjects import Aggregate

from .helpers import checkpoints, project_until


async def test_an_event_holding_a_nul_is_projected_with_u_fffd_in_its_place_and_replays_the_same(
    private_nats: NatsServer, private_store: EventStore, fresh_database: str
) -> None:
    store = private_store
    created = c.ClientCreated(
        client_id="nul", name="nul", scopes=("rag.embedding@1",), requests_per_minute=60, max_concurrency=2
    )
    await store.append(Aggregate.CLIENT, "nul", [created], ExpectedVersion.NO_STREAM)
    await store.append(
        Aggregate.CLIENT, "nul", [c.ClientDisabled(client_id="nul", reason="leak\x00ed")], ExpectedVersion.ANY
    )
    await store.append(
        Aggregate.PROJECT,
        "pr-nul",
        [
            c.ProjectRegistered(project_id="pr-nul", name="tea\x00m", owner="a\\u0000b"),
            c.ProjectFitEvidenceRecorded(
                project_id="pr-nul",
                capability="rag.embedding@1",
                evidence={"notes\x00": "x\x00"},
                passed=True,
            ),
        ],
        ExpectedVersion.NO_STREAM,
    )
    last = (await store.client.jetstream().stream_info("MF_EVENTS")).state.last_seq

    await project_until(fresh_database, private_nats.url, {"MF_EVENTS": last})

    assert await checkpoints(fresh_database) == {"MF_EVENTS": last}  # lag 0: nothing halted
    async with await psycopg.AsyncConnection.connect(fresh_database, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT c.disabled_reason, p.name, p.owner, f.evidence"
            " FROM mf.clients c, mf.projects p, mf.project_fit_evidence f"
        )
        # A literal backslash-u-0000 (no NUL) is text like any other and stays as it is.
        assert await cur.fetchall() == [
            ("leak\ufffded", "tea\ufffdm", "a\\u0000b", {"notes\ufffd": "x\ufffd"})
        ]
        cur = await conn.execute(
            "SELECT payload->>'reason' FROM mf.audit_log WHERE event_type = 'ClientDisabled'"
        )
        assert await cur.fetchall() == [("leak\ufffded",)]  # the audit payload reads as text, too

    rebuilt = await replay(fresh_database, private_nats.url, verify=True, progress=False)
    assert (rebuilt.differences, rebuilt.digest) == ([], rebuilt.live_digest)
