"""Every admin route, mounted by `gateway.app.create_app`."""

from __future__ import annotations

from gateway.admin import (
    clients,
    console_reads,
    operating,
    pipeline,
    projection,
    projects,
    releases,
    residencies,
)
from gateway.admin.console import CONSOLE_OPERATIONS
from gateway.admin.endpoint import Endpoint
from gateway.http.operation import Operation

ENDPOINTS: list[Endpoint] = [
    *pipeline.ENDPOINTS,
    *operating.ENDPOINTS,
    *releases.ENDPOINTS,
    *residencies.ENDPOINTS,
    *projects.ENDPOINTS,
    *clients.ENDPOINTS,
    *projection.ENDPOINTS,
    *console_reads.ENDPOINTS,
]


def admin_operations() -> list[Operation]:
    return [*(e.operation() for e in ENDPOINTS), *CONSOLE_OPERATIONS]
