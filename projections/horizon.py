"""What a rebuilt read model can hold of MF_REQUESTS, which keeps its messages for a limited time.

A replay reads each stream from its first message; once MF_REQUESTS messages have aged out (30
days by default), the rebuilt schema starts at the first one left (recorded as a gap from 1, see
`projections.gaps`), while the live schema still has the rows and audit lines of the older ones.
Those cannot be compared, and swapping the rebuilt schema in would drop them: `replay --verify`
compares both schemas from the rebuilt one's first MF_REQUESTS sequence on (`comparable`), and
`replay --swap` refuses while the live schema holds older request history (`older_requests`).
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from streams import subjects

Conn = psycopg.AsyncConnection[Any]


async def requests_from(conn: Conn, schema: str) -> int:
    """The first MF_REQUESTS sequence `schema` holds everything from: 1 unless some aged out unread."""
    cur = await conn.execute(
        sql.SQL("SELECT coalesce(max(last_seq), 0) + 1 FROM {}.projection_gaps WHERE stream = %s").format(
            sql.Identifier(schema)
        ),
        (subjects.REQUESTS_STREAM,),
    )
    row = await cur.fetchone()
    return int(row[0]) if row else 1


def _older(live: str, first: int) -> sql.Composed:
    """Audit lines of the live schema's MF_REQUESTS messages before `first` (alias a)."""
    return sql.SQL("SELECT 1 FROM {}.audit_log a WHERE a.stream = {} AND a.seq < {}").format(
        sql.Identifier(live), sql.Literal(subjects.REQUESTS_STREAM), sql.Literal(first)
    )


def comparable(live: str, first: int) -> dict[str, sql.Composable]:
    """Row filters (on alias t, per table) leaving what both schemas can hold: MF_REQUESTS audit
    lines from `first` on, and requests none of whose events came before it. Empty when `first` is 1."""
    if first <= 1:
        return {}
    return {
        "audit_log": sql.SQL("NOT (t.stream = {} AND t.seq < {})").format(
            sql.Literal(subjects.REQUESTS_STREAM), sql.Literal(first)
        ),
        "requests": sql.SQL("NOT EXISTS ({} AND a.payload->>'request_id' = t.request_id)").format(
            _older(live, first)
        ),
        # a key's last use is the same in both once it was used since `first`; else only live has it
        "client_usage": _used_since(live, first, "client_id"),
        "credential_usage": _used_since(live, first, "credential_id"),
    }


def _used_since(live: str, first: int, column: str) -> sql.Composed:
    """Rows (alias t) whose key was used (`ClientKeyUsed`) at or after MF_REQUESTS sequence `first`."""
    return sql.SQL(
        "EXISTS (SELECT 1 FROM {}.audit_log a WHERE a.stream = {} AND a.seq >= {}"
        " AND a.event_type = 'ClientKeyUsed' AND a.payload->>{} = t.{})"
    ).format(
        sql.Identifier(live),
        sql.Literal(subjects.REQUESTS_STREAM),
        sql.Literal(first),
        sql.Literal(column),
        sql.Identifier(column),
    )


async def older_requests(conn: Conn, live: str, first: int) -> int:
    """How many MF_REQUESTS messages before `first` the live schema holds (0 without a live schema)."""
    if first <= 1:
        return 0
    try:
        cur = await conn.execute(sql.SQL("SELECT count(*) FROM ({}) o").format(_older(live, first)))
    except psycopg.errors.UndefinedTable:
        return 0
    row = await cur.fetchone()
    return int(row[0]) if row else 0
