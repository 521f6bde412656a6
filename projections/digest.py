"""An order-independent digest of a read-model schema, and row-level differences between two.

Each row hashes to md5 of its canonical text (every column but `projected_at`, the wall-clock
time a batch was written, in a session pinned to UTC/ISO output); a table's digest is md5 over
its sorted row hashes; the schema's digest is sha256 over `table rows digest` lines. Batch sizes,
restarts and the order rows were written in therefore cannot change it. `schema_migrations`,
`telemetry` (a live feed, not events), `projection_gaps` (what one projection happened to
miss, see projections.gaps) and `projection_halts` (where one stopped) are left out. A `scope`
(a row filter per table, alias `t`) digests and compares part of a table only (see
projections.horizon).

Cost: a row's hash is computed once (`OFFSET 0` keeps PostgreSQL from inlining it into both the
sort key and the aggregated value, which doubled the work), and the tables can be shared out over
several connections, largest first, so the audit log hashes on one core while the rest do on another.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import Any, NamedTuple

import psycopg
from psycopg import sql

from projections.batch import Catalog

EXCLUDED_TABLES = frozenset(
    {"schema_migrations", "telemetry", "worker_memory", "projection_gaps", "projection_halts"}
)
EXCLUDED_COLUMNS = frozenset({"projected_at"})
Conn = psycopg.AsyncConnection[Any]
Scope = Mapping[str, sql.Composable]  # table -> row filter (alias t): the rows a digest covers


class TableDigest(NamedTuple):
    rows: int
    digest: str


async def _pin_output(conn: Conn) -> None:
    await conn.execute("SET TIME ZONE 'UTC'")
    await conn.execute("SET DateStyle TO 'ISO, YMD'")
    await conn.execute("SET extra_float_digits TO 1")
    await conn.execute("SET IntervalStyle TO 'iso_8601'")


def _row_hash(schema: str, table: str, columns: list[str]) -> sql.Composed:
    row = sql.SQL(", ").join(sql.SQL("t.{}").format(sql.Identifier(c)) for c in columns)
    return sql.SQL("md5(ROW({})::text)").format(row)


def digested_columns(catalog: Catalog, table: str) -> list[str]:
    return [c for c in catalog.columns[table] if c not in EXCLUDED_COLUMNS]


def _where(scope: Scope, table: str) -> sql.Composable:
    found = scope.get(table)
    return sql.SQL("") if found is None else sql.SQL(" WHERE ") + found


async def table_digests(
    conn: Conn, schema: str, helpers: Sequence[Conn] = (), scope: Scope | None = None
) -> dict[str, TableDigest]:
    """Every table's digest (of its rows in `scope`); `helpers` (other connections to the same
    database) share the work."""
    catalog = await Catalog.load(conn, schema)
    cur = await conn.execute(
        "SELECT c.relname, pg_relation_size(c.oid) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s AND c.relkind = 'r'",
        (schema,),
    )
    size = {table: int(bytes_) for table, bytes_ in await cur.fetchall()}
    tables = sorted((t for t in catalog.columns if t not in EXCLUDED_TABLES), key=lambda t: -size.get(t, 0))
    connections = [conn, *helpers]
    shares: list[list[str]] = [[] for _ in connections]
    loads = [0] * len(connections)
    for table in tables:  # largest first, each to the least loaded connection
        least = loads.index(min(loads))
        shares[least].append(table)
        loads[least] += size.get(table, 0) + 1

    async def digest_share(conn: Conn, share: list[str]) -> dict[str, TableDigest]:
        await _pin_output(conn)
        out = {}
        for table in share:
            query = sql.SQL(
                "SELECT count(*), coalesce(md5(string_agg(h, '' ORDER BY h COLLATE \"C\")), md5(''))"
                " FROM (SELECT {} AS h FROM {}.{} t{} OFFSET 0) s"
            ).format(
                _row_hash(schema, table, digested_columns(catalog, table)),
                sql.Identifier(schema),
                sql.Identifier(table),
                _where(scope or {}, table),
            )
            cur = await conn.execute(query)
            rows, digest = await cur.fetchone()  # type: ignore[misc]
            out[table] = TableDigest(int(rows), str(digest))
        return out

    parts = await asyncio.gather(
        *(digest_share(c, share) for c, share in zip(connections, shares, strict=True))
    )
    return {table: found for part in parts for table, found in part.items()}


def combine(tables: dict[str, TableDigest]) -> str:
    text = "".join(f"{name} {t.rows} {t.digest}\n" for name, t in sorted(tables.items()))
    return hashlib.sha256(text.encode()).hexdigest()


async def digest(conn: Conn, schema: str) -> str:
    return combine(await table_digests(conn, schema))


async def _keyed_hashes(
    conn: Conn, schema: str, table: str, catalog: Catalog, scope: Scope
) -> AsyncGenerator[tuple[str, str], None]:
    """(primary key text, row hash) of every row of `schema.table` in `scope`, in byte order of the
    key text."""
    await _pin_output(conn)
    key_text = sql.SQL("ROW({})::text").format(
        sql.SQL(", ").join(sql.SQL("t.{}").format(sql.Identifier(k)) for k in catalog.keys[table])
    )
    query = sql.SQL(
        'SELECT k, h FROM (SELECT {} AS k, {} AS h FROM {}.{} t{}) s ORDER BY k COLLATE "C"'
    ).format(
        key_text,
        _row_hash(schema, table, digested_columns(catalog, table)),
        sql.Identifier(schema),
        sql.Identifier(table),
        _where(scope, table),
    )
    async for key, row_hash in conn.cursor().stream(query):
        yield str(key), str(row_hash)


async def row_differences(
    left: tuple[Conn, str], right: tuple[Conn, str], table: str, limit: int = 10, scope: Scope | None = None
) -> list[str]:
    """Primary keys of rows (in `scope`) that differ between two schemas' copies of `table`, with
    which side has it.

    Each side, a (connection, schema), is read on its own connection (the live side may be a
    snapshot that cannot see the other schema's rows), sorted by key, and the two are merged here."""
    catalog = await Catalog.load(left[0], left[1])
    out: list[str] = []
    async with (
        contextlib.aclosing(_keyed_hashes(*left, table, catalog, scope or {})) as lefts,
        contextlib.aclosing(_keyed_hashes(*right, table, catalog, scope or {})) as rights,
    ):
        a, b = await anext(lefts, None), await anext(rights, None)
        while (a is not None or b is not None) and len(out) < limit:
            if a is not None and (b is None or a[0] < b[0]):
                out.append(f"{table} {a[0]}: only in {left[1]}")
                a = await anext(lefts, None)
            elif b is not None and (a is None or b[0] < a[0]):
                out.append(f"{table} {b[0]}: only in {right[1]}")
                b = await anext(rights, None)
            else:  # the same key on both sides
                assert a is not None
                assert b is not None
                if a[1] != b[1]:
                    out.append(f"{table} {a[0]}: differs")
                a, b = await anext(lefts, None), await anext(rights, None)
    return out
