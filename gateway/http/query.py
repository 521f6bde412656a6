"""Query parameters declared once: a route's parameters are one msgspec Struct, which the route
decodes its query string into (`decode_query`) and the OpenAPI document describes
(`parameters`): names, types, bounds and defaults cannot drift between the two."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

import msgspec

from gateway.http.body import convert
from streams import text

T = TypeVar("T")


def decode_query(raw: Mapping[str, str], type_: type[T]) -> T:
    """The typed parameters (strings read as the field's type), each string passing the text
    rule; a malformed or out-of-range value is INVALID_INPUT naming it. Unknown names are ignored."""
    return text.checked(convert(dict(raw), type_, "query parameter", strict=False))


def parameters(type_: type | None) -> list[dict[str, Any]]:
    """The OpenAPI `in: query` parameters of `type_` (a Struct of scalar fields), each with its
    schema as msgspec writes it (type, bounds, default)."""
    if type_ is None:
        return []
    schema = msgspec.json.schema(type_)
    fields = schema["$defs"][schema["$ref"].rsplit("/", 1)[-1]]
    required = set(fields.get("required", ()))
    return [
        {"name": name, "in": "query", "required": name in required, "schema": field}
        for name, field in fields["properties"].items()
    ]
