"""Rows as PostgreSQL COPY text, for rows a batch creates (see handlers.ops `new`).

A value reads back exactly as the same value sent in the upserts' JSON would: text as is, numbers
as their shortest repr (a non-finite float is JSON null, so NULL here too), booleans as
true/false (which a text column also gets from JSON), json/jsonb columns as the JSON encoding.
Fields are joined first and checked for COPY's special characters once per row; the row is
escaped field by field only when one is present (rare: ids, codes and timestamps hold none), and
the field count is checked there too (a row of a table without json columns is formatted inline).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import msgspec

_NULL = "\x00"  # a placeholder for NULL while checking a row: PostgreSQL text can never hold it
_json = msgspec.json.Encoder()
Field = Callable[[Any], str]


class NotCopyable(TypeError):
    """A value COPY text cannot carry as JSON would (the caller upserts those rows instead)."""


def scalar(value: Any) -> str:
    cls = value.__class__
    if cls is str:
        return value  # type: ignore[no-any-return]
    if value is None:
        return _NULL
    if cls is bool:
        return "true" if value else "false"
    if cls is float:
        return repr(value) if value - value == 0 else _NULL
    if cls is int:
        return str(value)
    raise NotCopyable(f"{cls.__name__} value for a scalar column")


def as_json(value: Any) -> str:
    return _NULL if value is None else _json.encode(value).decode()


def fields_for(types: Sequence[str]) -> list[Field]:
    """One formatter per column, from the columns' PostgreSQL data types."""
    return [as_json if t in ("json", "jsonb") else scalar for t in types]


def _escape(field: str) -> str:
    if field == _NULL:
        return "\\N"
    return field.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def copy_text(rows: Iterable[Iterable[Any]], fields: Sequence[Field]) -> str:
    """COPY text of `rows` (values in column order); raises NotCopyable."""
    tabs = len(fields) - 1
    plain = all(f is scalar for f in fields)  # no json columns: text values need no call at all
    lines = []
    for row in rows:
        if plain:
            values = [v if v.__class__ is str else scalar(v) for v in row]
        else:
            values = [f(v) for f, v in zip(fields, row, strict=True)]
        line = "\t".join(values)
        if line.count("\t") != tabs or "\\" in line or "\n" in line or "\r" in line:
            line = "\t".join(map(_escape, values))
        else:
            line = line.replace(_NULL, "\\N")
        lines.append(line)
    return "\n".join(lines) + "\n"
