"""Text as PostgreSQL can store it: the one character it cannot, NUL, becomes U+FFFD.

PostgreSQL refuses NUL in `text`, in `jsonb`, and in any `json` value read as text (`->>`,
`json_populate_recordset`), so an event holding one would halt the projector at that event for
good. The command edge refuses such text (streams.text), but an event recorded before it, or by
another writer, may still hold one: it is stored with U+FFFD (the Unicode replacement character)
in its place, in its rows and in its audit line alike. Live projection and replay both go through
here, so their digests stay equal. (A lone surrogate never gets this far: msgspec refuses to decode
one, so an event holding one does not decode and halts the projector as any corrupt event does.)

Both checks are one substring scan on the common path (no NUL).
"""

from __future__ import annotations

import re

REPLACEMENT = "\ufffd"
_ESCAPES = re.compile(r"\\\\|\\u0000")  # an escaped backslash is skipped whole: `\\u0000` is no NUL


def json_text(encoded: str) -> str:
    """JSON text with every escaped NUL (`\\u0000`) in its strings made U+FFFD."""
    if "\\u0000" not in encoded:
        return encoded
    return _ESCAPES.sub(_replace, encoded)


def plain(value: str) -> str:
    """Plain text with every NUL made U+FFFD."""
    return value.replace("\x00", REPLACEMENT) if "\x00" in value else value


def _replace(found: re.Match[str]) -> str:
    return "\\ufffd" if found[0] == "\\u0000" else found[0]
