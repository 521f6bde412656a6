"""What an audit may show of an event: one definition for the audit log in the read model
(`projections.audit`) and for `modelforge audit tail` (`eventstore.audit`).

A credential's key hash is as good as the key to anyone who can present a hash (and invites an
offline guess at a short key): it stays in the event log, where the gateway needs it, and goes
nowhere else.
"""

from __future__ import annotations

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
