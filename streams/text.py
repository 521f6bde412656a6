"""The one rule for operator- and client-supplied text that becomes an event.

Events are immutable, and the read model must store every event (a value PostgreSQL cannot hold
would stop the projector there for good), so text is refused at the command edge instead:
printable characters only, within a length per field. Refused are the C0 and C1 control
characters (NUL and ESC included; a multi-line field keeps newline and tab), the line and
paragraph separators U+2028/U+2029, and lone surrogates (not encodable as UTF-8).

A field's rule is declared on its Struct field, `Annotated[str, REASON]` (it covers every string
in the field: list items, dict keys and values); a field without one gets `NAME`. `checked(body)`
applies the rules to a decoded body; `check(param, text, rule)` to one value. A refusal is
INVALID_INPUT naming the field, and never echoes the text.

Pure module: no I/O.
"""

from __future__ import annotations

import re
import typing
from dataclasses import dataclass
from functools import cache
from typing import Any, TypeVar

import msgspec

from streams.codes import ServingError

T = TypeVar("T")


@dataclass(frozen=True)
class TextRule:
    max_length: int  # in characters (code points)
    multiline: bool = False  # newline and tab allowed


NAME = TextRule(256)  # names, ids, capabilities, channels: the default
REASON = TextRule(1_000)  # why an operator disabled, revoked, drained, approved
LONG = TextRule(4_096)  # file paths and configuration values
PROSE = TextRule(10_000, multiline=True)  # reviews and notes

_REFUSED_LINE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
_REFUSED_PROSE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def check(param: str, text: str, rule: TextRule = NAME) -> str:
    """`text` unchanged, or INVALID_INPUT naming `param`."""
    if len(text) > rule.max_length:
        raise ServingError("INVALID_INPUT", f"`{param}` is longer than {rule.max_length} characters", param)
    bad = (_REFUSED_PROSE if rule.multiline else _REFUSED_LINE).search(text)
    if bad is not None:
        kind = "a lone surrogate" if "\ud800" <= bad.group() <= "\udfff" else "a control character"
        raise ServingError(
            "INVALID_INPUT",
            f"`{param}` holds {kind} (U+{ord(bad.group()):04X}) at position {bad.start()}:"
            " only printable text is accepted" + (" (and newlines, tabs)" if rule.multiline else ""),
            param,
        )
    return text


def checked(body: T) -> T:
    """`body` (a decoded Struct) unchanged once every string in it passes its field's rule."""
    if isinstance(body, msgspec.Struct):
        for name, rule in _rules(type(body)):
            _walk(name, getattr(body, name), rule)
    return body


def _walk(param: str, value: Any, rule: TextRule) -> None:
    if isinstance(value, str):
        check(param, value, rule)
    elif isinstance(value, msgspec.Struct):
        checked(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            _walk(param, key, rule)
            _walk(param, item, rule)
    elif isinstance(value, list | tuple | set | frozenset):
        for item in value:
            _walk(param, item, rule)


@cache
def _rules(struct: type) -> tuple[tuple[str, TextRule], ...]:
    hints = typing.get_type_hints(struct, include_extras=True)
    out = []
    for field in msgspec.structs.fields(struct):
        found = [m for m in getattr(hints[field.name], "__metadata__", ()) if isinstance(m, TextRule)]
        out.append((field.name, found[0] if found else NAME))
    return tuple(out)
