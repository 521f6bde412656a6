"""NATS header blocks read and written by nats-py's rules, in fewer Python steps.

nats-py 2.16 checks each received header name for whitespace with `any(c.isspace() for c in key)`,
a generator step per character, and builds each sent block field by field (a regex match, a strip,
a translate and several buffer extends per header). The gateway sends eight messages with headers
per request and hears more (each event the live view hears carries its envelope in seven or more
headers): in a CPU-clock profile of the gateway at one client, these steps were about a fifth of
all its Python calls. Here one regex search checks a name, and a sent block is one string
joined and encoded once, with each header name checked once per process (a value translated only
where it holds a line break). `tests/unit/test_nats_headers.py` holds both to nats-py's own
output on the same input.
"""

from __future__ import annotations

import re
from typing import Any

from nats.errors import BadHeaderError

_CRLF = b"\r\n"
_WHITESPACE = re.compile(r"\s")  # for str patterns, the characters str.isspace() accepts
_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # nats-py's header name token
_VALUE_NEWLINES = str.maketrans({"\r": " ", "\n": " "})


def parse_header_lines(raw: bytes) -> dict[str, str]:
    """`Name: Value` lines → a dict; lines without a colon, and names that are not ASCII or hold
    whitespace, are skipped (as nats-py skips them)."""
    out: dict[str, str] = {}
    for line in raw.split(_CRLF):
        name, sep, value = line.partition(b":")
        if not sep:
            continue
        try:
            key = name.strip().decode("ascii")
        except UnicodeDecodeError:
            continue
        if _WHITESPACE.search(key) is None:
            out[key] = value.strip().decode("utf-8", "replace")
    return out


_NAMES_KEPT = 256  # names checked and kept (a process sends a handful; more are checked each time)
_names: dict[str, str] = {}


def _name(key: str) -> str:
    """The name as sent ("" for one nats-py skips: blank); BadHeaderError for an invalid one."""
    name = _names.get(key)
    if name is None:
        name = key.strip()
        if name and not _NAME.fullmatch(name):
            raise BadHeaderError(name)
        if len(_names) < _NAMES_KEPT:
            _names[key] = name
    return name


def header_block(headers: dict[str, Any]) -> bytes:
    """The `NATS/1.0` block nats-py sends for `headers` (line breaks in values become spaces).
    Built as one string and encoded once (names are ASCII, values UTF-8, as nats-py encodes them);
    a value is translated only where it holds a line break, which none of ours do."""
    lines = ["NATS/1.0\r\n"]
    for key, value in headers.items():
        name = _name(key)
        if name:
            value = value.strip()
            if "\r" in value or "\n" in value:
                value = value.translate(_VALUE_NEWLINES)
            lines.append(f"{name}: {value}\r\n")
    lines.append("\r\n")
    return "".join(lines).encode()
