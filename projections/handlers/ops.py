"""Row operations: what handlers return, and how a batch folds them before writing.

An `Op` upserts one row by primary key: `set` columns take the given values, `add` columns grow
by the given amounts (from 0 for a new row); columns not named keep their value (or default).
Handlers build both dicts afresh for each op, and folding takes them over (no copy per row).
Folding consecutive ops on one row gives the row a single sequential application would, so a
batch writes each touched row once and the result does not depend on where batches are cut.
"""

from __future__ import annotations

from typing import Any

import msgspec


class Op(msgspec.Struct, gc=False):  # a Struct: built per row touched, 3x cheaper than a NamedTuple
    table: str
    key: tuple[Any, ...]
    set: dict[str, Any]
    add: dict[str, int] | None = None


def up(table: str, key: tuple[Any, ...], **columns: Any) -> Op:
    return Op(table, key, columns)


class Pending:
    """The folded ops of one batch: table -> key -> [set, add]."""

    def __init__(self) -> None:
        self.tables: dict[str, dict[tuple[Any, ...], tuple[dict[str, Any], dict[str, int]]]] = {}

    def fold(self, op: Op) -> None:
        rows = self.tables.get(op.table)
        if rows is None:
            rows = self.tables[op.table] = {}
        current = rows.get(op.key)
        if current is None:
            rows[op.key] = (op.set, op.add or {})
            return
        sets, adds = current
        if adds:  # a column set now drops the increments folded before it
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
