"""Preparing a batch of facts for one schema: rows folded per key, audit rows, statements.

Rows: the batch's ops are folded per row (see handlers.ops), then each table gets one
`INSERT .. SELECT FROM json_populate_recordset(rows) ON CONFLICT DO UPDATE` per column signature;
the audit log gets every fact as a line of COPY text. `projections.writer` commits the result.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
import psycopg
from psycopg import sql

from projections import storable
from projections.audit import audit_line
from projections.facts import Fact, tolerated, why
from projections.gaps import AGED_STREAMS, Gap, lost_events, missing
from projections.handlers import Op, Pending, ops_for
from streams.codec import UnknownEvent

Conn = psycopg.AsyncConnection[Any]
_json = msgspec.json.Encoder()
_Signature = tuple[tuple[str, ...], tuple[str, ...]]  # (set columns, add columns)


class ProjectionHalted(Exception):
    """An event the projection cannot apply: it stops here, naming the event."""

    def __init__(self, stream: str, seq: int, event_type: str, cause: str) -> None:
        super().__init__(f"projection halted at {stream} sequence {seq} ({event_type}): {cause}")
        self.stream, self.seq, self.event_type, self.cause = stream, seq, event_type, cause


class Catalog:
    """Column types and primary keys of a schema's tables, read from PostgreSQL itself."""

    def __init__(self, columns: dict[str, dict[str, str]], keys: dict[str, tuple[str, ...]]) -> None:
        self.columns, self.keys = columns, keys

    @classmethod
    async def load(cls, conn: Conn, schema: str) -> Catalog:
        columns: dict[str, dict[str, str]] = {}
        cur = await conn.execute(
            "SELECT c.table_name, c.column_name, c.data_type FROM information_schema.columns c"
            " JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name"
            " WHERE c.table_schema = %s AND t.table_type = 'BASE TABLE' ORDER BY c.table_name, c.ordinal_position",
            (schema,),
        )
        for table, column, data_type in await cur.fetchall():
            columns.setdefault(table, {})[column] = data_type
        keys: dict[str, tuple[str, ...]] = {}
        cur = await conn.execute(
            "SELECT tc.table_name, kcu.column_name FROM information_schema.table_constraints tc"
            " JOIN information_schema.key_column_usage kcu ON kcu.constraint_name = tc.constraint_name"
            " AND kcu.table_schema = tc.table_schema"
            " WHERE tc.constraint_type = 'PRIMARY KEY' AND tc.table_schema = %s"
            " ORDER BY tc.table_name, kcu.ordinal_position",
            (schema,),
        )
        for table, column in await cur.fetchall():
            keys[table] = (*keys.get(table, ()), column)
        return cls(columns, keys)


def plan(
    facts: Sequence[Fact], after: Mapping[str, int]
) -> tuple[Pending, list[str], int, list[Gap], ProjectionHalted | None]:
    """Fold the batch's rows; returns (rows, audit lines, how many facts were usable, the stretches
    of an aged stream skipped before them, the halt at the first fact that cannot be applied).

    `after` is the last sequence applied (or prepared) of each stream before these facts. The caller
    applies the usable prefix, then halts.
    """
    pending = Pending()
    lines: list[str] = []
    gaps: list[Gap] = []
    last = dict(after)
    fold = pending.fold
    for index, fact in enumerate(facts):
        event = fact.event
        halt: ProjectionHalted | None = None
        gap = missing(fact.stream, last.get(fact.stream, 0), fact.seq)
        if gap is not None and fact.stream not in AGED_STREAMS:
            halt = ProjectionHalted(fact.stream, fact.seq, _type(fact), lost_events(gap))
        elif isinstance(event, UnknownEvent):
            if not tolerated(event):
                halt = ProjectionHalted(fact.stream, fact.seq, event.event_type, why(event))
        else:
            try:
                rows: list[Op] = ops_for(event, fact.seq, fact.occurred_at)
            except Exception as exc:
                halt = ProjectionHalted(fact.stream, fact.seq, _type(fact), f"{type(exc).__name__}: {exc}")
            else:
                for op in rows:
                    fold(op)
        if halt is not None:
            return pending, lines, index, gaps, halt
        if gap is not None:
            gaps.append(gap)
        last[fact.stream] = fact.seq
        lines.append(audit_line(fact))
    return pending, lines, len(facts), gaps, None


def _type(fact: Fact) -> str:
    event = fact.event
    return event.event_type if isinstance(event, UnknownEvent) else type(event).__name__


@dataclass
class Prepared:
    """A batch made ready for the database (pure CPU work, see `Preparer.prepare`): the usable
    facts, the checkpoint each stream reaches with them, their audit rows as COPY text, one
    (statement, [rows as JSON]) per upsert, the halt to raise once the usable prefix is applied,
    and the stretches of an aged stream the usable facts skip (see `projections.gaps`)."""

    facts: Sequence[Fact]
    positions: dict[str, int]
    copy_text: str
    upserts: list[tuple[bytes, list[Any]]] = field(default_factory=list)
    halt: ProjectionHalted | None = None
    gaps: list[Gap] = field(default_factory=list)


class Preparer:
    """Pure CPU, no I/O: safe in a worker thread while the connection commits another batch."""

    def __init__(self, schema: str, catalog: Catalog) -> None:
        self.schema, self.catalog = schema, catalog
        self._statements: dict[tuple[str, tuple[str, ...], tuple[str, ...]], bytes] = {}

    def prepare(self, facts: Sequence[Fact], after: Mapping[str, int]) -> Prepared:
        """`after`: the last sequence of each stream applied (or prepared) before `facts`."""
        pending, lines, usable, gaps, halt = plan(facts, after)
        upserts = [item for table, rows in pending.tables.items() for item in self._upserts(table, rows)]
        copy_text = "\n".join(lines) + "\n" if lines else ""
        positions = {fact.stream: fact.seq for fact in facts[:usable]}
        return Prepared(facts[:usable], positions, copy_text, upserts, halt, gaps)

    def _upserts(
        self, table: str, rows: dict[tuple[Any, ...], tuple[dict[str, Any], dict[str, int]]]
    ) -> list[tuple[bytes, list[Any]]]:
        keys = self.catalog.keys[table]
        # Rows group by their columns in fold order: the same set in another order is one more
        # statement in the rare batch that has both, instead of a sort per row in every batch.
        groups: dict[_Signature, list[dict[str, Any]]] = {}
        for key, (row, adds) in rows.items():
            signature = (tuple(row), tuple(adds))
            # The folded `set` dict becomes the row itself (json_populate_recordset reads columns by name).
            row.update(zip(keys, key, strict=True))
            if adds:
                row.update(adds)
            group = groups.get(signature)
            if group is None:
                groups[signature] = [row]
            else:
                group.append(row)
        return [
            (
                self._statement(table, keys, set_cols, add_cols),
                [storable.json_text(_json.encode(group).decode())],
            )
            for (set_cols, add_cols), group in groups.items()
        ]

    def _statement(
        self, table: str, keys: tuple[str, ...], set_cols: tuple[str, ...], add_cols: tuple[str, ...]
    ) -> bytes:
        cache_key = (table, set_cols, add_cols)
        found = self._statements.get(cache_key)
        if found is not None:
            return found
        types = self.catalog.columns[table]
        unknown = [c for c in (*set_cols, *add_cols) if c not in types]
        if unknown:
            raise KeyError(f"{table} has no column(s) {', '.join(unknown)}")
        columns = sql.SQL(", ").join(map(sql.Identifier, (*keys, *set_cols, *add_cols)))
        updates = [sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c)) for c in set_cols]
        updates += [sql.SQL("{0} = t.{0} + EXCLUDED.{0}").format(sql.Identifier(c)) for c in add_cols]
        conflict = (
            sql.SQL("DO UPDATE SET ") + sql.SQL(", ").join(updates) if updates else sql.SQL("DO NOTHING")
        )
        # The rows travel as one JSON array of objects (msgspec encodes it at C speed; psycopg would
        # dump array parameters value by value in Python), typed by the table's own row type.
        # Rendered once: composing the statement again for every batch cost a trickle's projector
        # more than its rows did (bench/trickle.py, cProfile).
        statement = (
            sql.SQL(
                "INSERT INTO {0}.{1} AS t ({2}) SELECT {2} FROM json_populate_recordset(NULL::{0}.{1}, %s::json)"
                " ON CONFLICT ({3}) {4}"
            )
            .format(
                sql.Identifier(self.schema),
                sql.Identifier(table),
                columns,
                sql.SQL(", ").join(map(sql.Identifier, keys)),
                conflict,
            )
            .as_bytes(None)
        )
        self._statements[cache_key] = statement
        return statement
