"""A batch written against a checkpoint that moved meanwhile (another writer, a swapped replay)
changes nothing: the writer sends its rows and the checkpoint together with the check, so a
mismatch must roll all of them back."""

from __future__ import annotations

import psycopg
import pytest

from projections.batch import Catalog
from projections.facts import Fact
from projections.migrate import migrate
from projections.writer import CheckpointMoved, Writer
from streams.events import requests as r

CAPABILITY = "rag.embedding@1"


def accepted(seq: int) -> Fact:
    event = r.RequestAccepted(
        request_id=f"req-{seq}",
        client_id="client-1",
        capability=CAPABILITY,
        input_sha256=f"{seq:064x}",
        shape_bucket="items:1-4/chars:0-512",
        items=1,
    )
    at = f"2026-12-04T09:00:0{seq}+00:00"
    headers = {"Mf-Event-Type": "RequestAccepted"}
    return Fact("MF_REQUESTS", seq, "mf.req.rag.RequestAccepted", headers, event, at, seq)


async def test_a_batch_whose_checkpoint_moved_writes_no_row_audit_line_or_checkpoint(
    fresh_database: str,
) -> None:
    async with await psycopg.AsyncConnection.connect(fresh_database, autocommit=True) as conn:
        await migrate(conn, "mf")
        writer = Writer(conn, "mf", await Catalog.load(conn, "mf"), notify=False)
        assert await writer.write([accepted(1)], {}) == {"MF_REQUESTS": 1}

        with pytest.raises(CheckpointMoved):
            await writer.write([accepted(2)], {})  # as if sequence 1 had not been applied

        counts = await conn.execute(
            "SELECT (SELECT count(*) FROM mf.requests), (SELECT count(*) FROM mf.audit_log),"
            " (SELECT last_seq FROM mf.checkpoints WHERE stream = 'MF_REQUESTS')"
        )
        assert await counts.fetchone() == (1, 1, 1)


async def test_after_a_moved_checkpoint_the_same_session_writes_the_next_batch(fresh_database: str) -> None:
    # The writer opens its transaction itself (BEGIN in the batch's query string), so it must also
    # end a refused one: left open, the next batch would run inside it and never commit.
    async with await psycopg.AsyncConnection.connect(fresh_database, autocommit=True) as conn:
        await migrate(conn, "mf")
        writer = Writer(conn, "mf", await Catalog.load(conn, "mf"), notify=False)
        await writer.write([accepted(1)], {})
        with pytest.raises(CheckpointMoved):
            await writer.write([accepted(2)], {})

        assert await writer.write([accepted(2)], {"MF_REQUESTS": 1}) == {"MF_REQUESTS": 2}

    async with await psycopg.AsyncConnection.connect(fresh_database, autocommit=True) as other:
        counts = await other.execute(
            "SELECT (SELECT count(*) FROM mf.requests), (SELECT count(*) FROM mf.audit_log),"
            " (SELECT last_seq FROM mf.checkpoints WHERE stream = 'MF_REQUESTS')"
        )
        assert await counts.fetchone() == (2, 2, 2)
