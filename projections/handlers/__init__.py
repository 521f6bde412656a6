"""Pure event -> row-operation mapping, one module per area. No I/O."""

from __future__ import annotations

from projections.handlers import control, requests, serving
from projections.handlers.ops import Op, Pending, up
from streams.events.base import Event

_AREAS = (requests.ops, serving.ops, control.ops)


class NoHandler(Exception):
    """A catalogue event this projection has no rows for: a bug, never skipped silently."""


def ops_for(event: Event, seq: int, at: str | None) -> list[Op]:
    for area in _AREAS:
        rows = area(event, seq, at)
        if rows is not None:
            return rows
    raise NoHandler(f"no projection handler for {type(event).__name__}")


__all__ = ["NoHandler", "Op", "Pending", "ops_for", "up"]
