"""The gateway's process imports no numpy: its one use (vectors as base64) needs none, and the
import cost each start ~50-100 ms and ~10 MiB."""

from __future__ import annotations

from tests.support.imports import imported_along


def test_the_gateway_imports_no_numpy() -> None:
    assert imported_along(["gateway.process", "gateway.cli"], ["numpy"]) == []
