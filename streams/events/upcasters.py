"""Upcasters: lift an old payload one schema version up. Old events must always decode.

Keyed by (event type, version it lifts from). Each step is a pure dict -> dict function.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]


def _client_created_v1_to_v2(payload: dict[str, Any]) -> dict[str, Any]:
    # v1 spelled the limits `rpm` and `concurrency`.
    lifted = {k: v for k, v in payload.items() if k not in ("rpm", "concurrency")}
    lifted["requests_per_minute"] = payload["rpm"]
    lifted["max_concurrency"] = payload["concurrency"]
    return lifted


UPCASTERS: dict[tuple[str, int], Upcaster] = {
    ("ClientCreated", 1): _client_created_v1_to_v2,
}
