"""A node registering again (restarted on changed hardware or runtimes) keeps what operators
decided about it in the serving catalogue: a decommissioned node stays unschedulable."""

from __future__ import annotations

import msgspec

from gateway.state.catalog import evolve_catalog
from streams.events import control as c
from tests.unit.gateway.test_envelope_staleness import REGISTERED, catalog_of


def test_a_decommissioned_node_stays_decommissioned_when_it_registers_again() -> None:
    restarted = msgspec.structs.replace(REGISTERED, runtimes=("onnxruntime-cpu", "tensorrt"))
    catalog = catalog_of(REGISTERED, c.NodeDecommissioned(node_id="node-1", reason="retired"), restarted)
    node = catalog.nodes["node-1"]
    assert node.decommissioned
    assert not node.schedulable
    assert node.runtimes == ("onnxruntime-cpu", "tensorrt")


def test_a_node_registering_again_keeps_its_enablement_eligibility_and_generation() -> None:
    catalog = catalog_of(
        REGISTERED,
        c.NodeDisabled(node_id="node-1", reason="maintenance"),
        c.NodeProductionEligibilityChanged(node_id="node-1", eligible=False, reason="lab only"),
        c.WorkerStarted(node_id="node-1", generation=3, residencies=()),
    )
    node = evolve_catalog(catalog, msgspec.structs.replace(REGISTERED, hardware_fingerprint="hw-2")).nodes[
        "node-1"
    ]
    assert (node.enabled, node.production_eligible, node.generation) == (False, False, 3)
    assert node.hardware_fingerprint == "hw-2"
