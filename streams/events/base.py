"""The base of every event: a frozen, tagged msgspec Struct.

The tag (the class name) is the event type: it names the subject's last token and lets a payload
decode on its own. `schema_version` is a class-level fact; upcasters lift older payloads.
"""

from __future__ import annotations

from typing import ClassVar

import msgspec


class Event(msgspec.Struct, frozen=True, kw_only=True, tag=True, tag_field="type"):
    """Base for all events. New fields must have defaults; types never change (msgspec rules)."""

    schema_version: ClassVar[int] = 1

    @classmethod
    def event_type(cls) -> str:
        return cls.__name__
