"""Build a sample instance of any catalogue event from its annotations (for round-trip tests)."""

from __future__ import annotations

import types
import typing
from datetime import UTC, datetime
from typing import Any

import msgspec


def sample_value(annotation: Any) -> Any:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if annotation is str:
        return "sample"
    if annotation is int:
        return 7
    if annotation is float:
        return 1.5
    if annotation is bool:
        return True
    if annotation is bytes:
        return b"x"
    if annotation is datetime:
        return datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    if origin is typing.Literal:
        return args[0]
    if origin in (typing.Union, types.UnionType):
        return sample_value(next(a for a in args if a is not type(None)))
    if origin is tuple:
        return (sample_value(args[0]),) if args else ()
    if origin is list:
        return [sample_value(args[0])]
    if origin is dict:
        return {"k": "v"} if args[1] in (str, object) else {"k": sample_value(args[1])}
    if isinstance(annotation, type) and issubclass(annotation, msgspec.Struct):
        return sample(annotation)
    raise TypeError(f"no sample for {annotation!r}")


def sample(cls: type[msgspec.Struct]) -> Any:
    hints = typing.get_type_hints(cls)
    return cls(**{f: sample_value(hints[f]) for f in cls.__struct_fields__})
