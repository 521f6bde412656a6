"""Checking a real answer against the type its OpenAPI response schema is generated from."""

from __future__ import annotations

from typing import Any

import msgspec


def conforms(body: Any, answer: Any) -> None:
    """`body` decodes into `answer` (a msgspec Struct type) and has no field the type leaves out."""
    msgspec.convert(body, answer)
    assert set(body) <= {field.name for field in msgspec.structs.fields(answer)}
