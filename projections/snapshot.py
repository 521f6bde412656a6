"""The live read model as of one moment, for `replay --verify` while the projector keeps running.

Its checkpoints and its tables are read in one REPEATABLE READ transaction, opened before the
replay starts and held until the live digest is taken: the replay rebuilds exactly up to those
checkpoints, and rows the running projector commits meanwhile are not seen (each batch commits its
rows with its checkpoint, so the snapshot holds a batch whole or not at all). Helper connections
that share out the hashing join the same snapshot (`pg_export_snapshot` / `SET TRANSACTION
SNAPSHOT`). Holding the transaction keeps vacuum from removing row versions newer than it until
the replay ends.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from projections import digest
from projections.digest import TableDigest

Conn = psycopg.AsyncConnection[Any]


async def _repeatable_read(database_url: str) -> Conn:
    conn = await psycopg.AsyncConnection.connect(database_url, prepare_threshold=None)
    await conn.set_isolation_level(psycopg.IsolationLevel.REPEATABLE_READ)
    await conn.set_read_only(True)
    return conn


class LiveSnapshot:
    def __init__(self, conn: Conn, database_url: str, schema: str, checkpoints: dict[str, int]) -> None:
        self.conn = conn
        self.database_url = database_url
        self.schema = schema
        self.checkpoints = checkpoints

    @classmethod
    async def open(cls, database_url: str, schema: str) -> LiveSnapshot:
        conn = await _repeatable_read(database_url)
        try:
            # The session may wait minutes, idle in its transaction, while the replay runs.
            await conn.execute("SET idle_in_transaction_session_timeout TO 0")
            # the transaction's first query: its snapshot is taken here
            cur = await conn.execute("SELECT to_regclass(%s)", (f'"{schema}".checkpoints',))
            checkpoints: dict[str, int] = {}
            if (await cur.fetchone()) != (None,):
                cur = await conn.execute(
                    sql.SQL("SELECT stream, last_seq FROM {}.checkpoints").format(sql.Identifier(schema))
                )
                checkpoints = {stream: int(seq) for stream, seq in await cur.fetchall()}
        except BaseException:
            await conn.close()
            raise
        return cls(conn, database_url, schema, checkpoints)

    async def table_digests(self, scope: digest.Scope | None = None) -> dict[str, TableDigest]:
        """Every live table's digest (of its rows in `scope`) as of the snapshot, hashed on two
        connections."""
        cur = await self.conn.execute("SELECT pg_export_snapshot()")
        (snapshot,) = await cur.fetchone()  # type: ignore[misc]
        helper = await _repeatable_read(self.database_url)
        async with helper:
            await helper.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot)))
            return await digest.table_digests(self.conn, self.schema, [helper], scope)

    async def close(self) -> None:
        await self.conn.close()  # ends the read-only transaction: nothing to commit
