"""A deployment's derived `health_status`, as the reference derives it."""

from __future__ import annotations

import msgspec
import pytest

from gateway.deployments.evolve import evolve_deployment
from gateway.deployments.health import health_status
from gateway.deployments.model import DeploymentState
from streams.events import serving as s
from tests.support.events import stable_deployment

ENVELOPE = s.ResourceEnvelope(required_bytes=100, peak_bytes=120, per_request_bytes=10, cold_load_ms=50)
_PROMOTED = evolve_deployment(None, stable_deployment("d", ENVELOPE), 1)
assert _PROMOTED is not None
STABLE: DeploymentState = _PROMOTED


def test_a_loaded_deployment_whose_health_check_passes_is_healthy() -> None:
    assert health_status(STABLE, loaded=True, failed_check=False, placeable=True) == "healthy"


def test_a_loaded_deployment_whose_last_health_check_failed_a_layer_is_degraded() -> None:
    assert health_status(STABLE, loaded=True, failed_check=True, placeable=True) == "degraded"


def test_a_deployment_not_loaded_is_ready_on_demand_while_a_live_node_can_load_it() -> None:
    assert health_status(STABLE, loaded=False, failed_check=False, placeable=True) == "ready_on_demand"


def test_a_deployment_no_live_node_can_load_is_unavailable() -> None:
    assert health_status(STABLE, loaded=False, failed_check=False, placeable=False) == "unavailable"


def test_a_draining_deployment_is_degraded() -> None:
    draining = msgspec.structs.replace(STABLE, draining=True)

    assert health_status(draining, loaded=True, failed_check=False, placeable=True) == "degraded"


@pytest.mark.parametrize(
    "state",
    [
        msgspec.structs.replace(STABLE, draining=True, drained=True),
        msgspec.structs.replace(STABLE, channel="experiment", route="r", active=False),
    ],
    ids=["drained", "inactive experiment"],
)
def test_a_deployment_that_takes_no_requests_is_unavailable(state: DeploymentState) -> None:
    assert health_status(state, loaded=True, failed_check=False, placeable=True) == "unavailable"
