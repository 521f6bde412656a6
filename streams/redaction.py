"""What an audit may show of an event: one definition for the audit log in the read model
(`projections.audit`) and for `modelforge audit tail` (`eventstore.audit`); and what a log may show
of a failure while serving a request (`fault_summary`).

A credential's key hash is as good as the key to anyone who can present a hash (and invites an
offline guess at a short key): it stays in the event log, where the gateway needs it, and goes
nowhere else.
"""

from __future__ import annotations

import traceback
from typing import TypeVar

import msgspec

from streams.events.control import CredentialIssued, CredentialRotated

REDACTED_TYPES = (CredentialIssued, CredentialRotated)  # the events carrying `key_sha256`
REDACTED = "<redacted>"

E = TypeVar("E", bound=msgspec.Struct)


def redacted(event: E) -> E:
    """`event` with its key hash replaced by REDACTED when it carries one; else `event` itself."""
    if isinstance(event, REDACTED_TYPES):
        return msgspec.structs.replace(event, key_sha256=REDACTED)
    return event


def fault_summary(error: BaseException) -> str:
    """An exception as a log may show it: its type and its traceback (where it was raised, the
    source lines), without its message or arguments, which may quote a request's content (a
    decoding error holds the bytes it could not decode; `int(text)` names the text)."""
    frames = traceback.format_list(traceback.extract_tb(error.__traceback__))
    kind = type(error)
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    return f"{name} (message withheld: it may quote request content)\n" + "".join(frames).rstrip()
