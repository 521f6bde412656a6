"""What the HTTP handlers share: the serving context, client directory and limiter."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.clients.directory import ClientDirectory
from gateway.clients.limits import RequestLimiter
from gateway.clients.usage import UsageMarks
from gateway.operators import OperatorFile
from gateway.read_models import ReadModels
from gateway.serving.context import ServingContext
from gateway.serving.fleet_metrics import FleetMetrics


@dataclass
class Edge:
    ctx: ServingContext
    directory: ClientDirectory
    limiter: RequestLimiter
    operator_token: str = ""  # the shared admin key (empty: named operators only)
    operators: OperatorFile = field(default_factory=lambda: OperatorFile(None))
    fleet_metrics: FleetMetrics | None = None  # the agents' metrics, for /metrics (closed likewise)
    ready: bool = False
    usage: UsageMarks = field(default_factory=UsageMarks)  # when to record a key's use

    @property
    def read_models(self) -> ReadModels:  # closed by the replica's close
        return self.ctx.read_models
