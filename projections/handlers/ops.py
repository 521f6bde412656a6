"""Row operations: what handlers return, and how a batch folds them before writing.

An `Op` upserts one row by primary key: `set` columns take the given values, `add` columns grow
by the given amounts (from 0 for a new row); columns not named keep their value (or default).
Folding consecutive ops on one row gives the row a single sequential application would, so a
batch writes each touched row once and the result does not depend on where batches are cut.

An op made by `new` is the event that creates its row (a request's acceptance, a lease's grant, a
placement decision): a row whose first op in a batch is one is `created` there, and the writer
inserts it by COPY, falling back to the upsert should the row exist after all.
"""

from __future__ import annotations

from typing import Any

import msgspec


class Op(msgspec.Struct, gc=False):  # a Struct: built per row touched, 3x cheaper than a NamedTuple
    table: str
    key: tuple[Any, ...]
    set: dict[str, Any]
    add: dict[str, int] | None = None
    new: bool = False  # the event that creates this row: no earlier event can have written it


def up(table: str, key: tuple[Any, ...], **columns: Any) -> Op:
    return Op(table, key, columns)


def new(table: str, key: tuple[Any, ...], **columns: Any) -> Op:
    return Op(table, key, columns, None, True)


class Pending:
    """The folded ops of one batch: table -> key -> [set, add]; `created`: table -> the keys whose
    first op in the batch was a `new` one."""

    def __init__(self) -> None:
        self.tables: dict[str, dict[tuple[Any, ...], tuple[dict[str, Any], dict[str, int]]]] = {}
        self.created: dict[str, set[tuple[Any, ...]]] = {}

    def fold(self, op: Op) -> None:
        rows = self.tables.get(op.table)
        if rows is None:
            rows = self.tables[op.table] = {}
        current = rows.get(op.key)
        if current is None:
            rows[op.key] = (dict(op.set), dict(op.add) if op.add else {})
            if op.new:
                self.created.setdefault(op.table, set()).add(op.key)
            return
        sets, adds = current
        for column in op.set:
            adds.pop(column, None)
        sets.update(op.set)
        if op.add:
            for column, delta in op.add.items():
                if column in sets:
                    sets[column] = (sets[column] or 0) + delta
                else:
                    adds[column] = adds.get(column, 0) + delta

    def __len__(self) -> int:
        return sum(len(rows) for rows in self.tables.values())
