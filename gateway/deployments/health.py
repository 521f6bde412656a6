"""A deployment's derived health, as the reference derives it (`health_status` in the admin
deployment reads), from what the live view knows: whether a copy of it is loaded on an accelerator
that takes work, the layered health its agent last measured there (process, runtime, model), and
whether any accelerator could load it.

- `unavailable`: drained, an experiment switched off, or no node that could serve it is live;
- `degraded`: draining, or loaded while its last health check failed a layer;
- `healthy`: loaded, its last health check passing;
- `ready_on_demand`: not loaded (or loading), and a live node can load it on the next request.

Pure: the live view's facts go in, the name comes out.
"""

from __future__ import annotations

from typing import Literal

from gateway.deployments.model import DeploymentState

HealthStatus = Literal["healthy", "degraded", "ready_on_demand", "unavailable"]


def health_status(
    deployment: DeploymentState, *, loaded: bool, failed_check: bool, placeable: bool
) -> HealthStatus:
    """`loaded`: a copy is loaded on an accelerator that takes work; `failed_check`: its last
    health check failed a layer; `placeable`: some accelerator of a live, enabled node takes work."""
    if deployment.drained or (deployment.channel != "stable" and not deployment.active):
        return "unavailable"
    if deployment.draining:
        return "degraded"
    if loaded:
        return "degraded" if failed_check else "healthy"
    return "ready_on_demand" if placeable else "unavailable"
