"""Pure event -> row-operation mapping, one module per area. No I/O."""

from __future__ import annotations

from collections.abc import Callable

from projections.handlers import artifacts, clients, identity, nodes, promotion, releases, requests, serving
from projections.handlers.ops import Op, Pending, up
from streams.events.base import Event

Area = Callable[[Event, int, str | None], list[Op] | None]
_AREAS: tuple[Area, ...] = (
    requests.ops,
    serving.ops,
    releases.ops,
    artifacts.ops,
    nodes.ops,
    promotion.ops,
    clients.ops,
    identity.ops,
)
# Event type -> the area that has rows for it (areas match on the type alone): one call per event.
_AREA_OF: dict[type[Event], Area] = {}


class NoHandler(Exception):
    """A catalogue event this projection has no rows for: a bug, never skipped silently."""


def ops_for(event: Event, seq: int, at: str | None) -> list[Op]:
    area = _AREA_OF.get(type(event))
    if area is not None:
        rows = area(event, seq, at)
        if rows is not None:
            return rows
    for area in _AREAS:
        rows = area(event, seq, at)
        if rows is not None:
            _AREA_OF[type(event)] = area
            return rows
    raise NoHandler(f"no projection handler for {type(event).__name__}")


__all__ = ["NoHandler", "Op", "Pending", "ops_for", "up"]
