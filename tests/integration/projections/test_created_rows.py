"""An event creating a row that exists already (the same request accepted again in a later batch)
updates it: the rows do not depend on where batches are cut."""

from __future__ import annotations

import msgspec
import psycopg

from projections import digest
from projections.batch import Catalog
from projections.facts import Fact
from projections.migrate import migrate
from projections.writer import Writer
from streams.events import requests as r

from .test_read_model import accepted


def accepted_again(rid: str, items: int) -> r.RequestAccepted:
    return msgspec.structs.replace(accepted(rid), client_id="c\tx", items=items)


def facts() -> list[Fact]:
    events = [
        accepted_again(rid, items) for rid, items in (("r1", 1), ("r2", 2), ("r1", 3), ("r3", 4), ("r2", 5))
    ]
    at = "2026-11-30T10:00:00+00:00"
    return [
        Fact("MF_REQUESTS", seq, "mf.req.x.RequestAccepted", {"Mf-Event-Type": "RequestAccepted"}, e, at, seq)
        for seq, e in enumerate(events, 1)
    ]


async def test_a_row_created_again_is_updated_whatever_the_batch_size(fresh_database: str) -> None:
    async with await psycopg.AsyncConnection.connect(fresh_database, autocommit=True) as conn:
        digests = []
        for schema, size in (("one", 1), ("two", 2), ("five", 5)):
            await migrate(conn, schema)
            writer = Writer(conn, schema, await Catalog.load(conn, schema), notify=False)
            done: dict[str, int] = {}
            batch = facts()
            for start in range(0, len(batch), size):
                done = await writer.write(batch[start : start + size], done)
            assert done == {"MF_REQUESTS": 5}
            cur = await conn.execute(f"SELECT request_id, items, client_id FROM {schema}.requests ORDER BY 1")
            assert await cur.fetchall() == [("r1", 3, "c\tx"), ("r2", 5, "c\tx"), ("r3", 4, "c\tx")]
            digests.append(await digest.digest(conn, schema))
        assert len(set(digests)) == 1
