"""What a node's drain unloads: every copy resident on the node's accelerators, but those already
unloading; nothing of another node."""

from __future__ import annotations

from gateway.operations.node_drain import Copy, drain_targets
from gateway.scheduler import AcceleratorState, ResidencyState, Resident


def accelerator(accelerator_id: str, node_id: str, *residents: Resident) -> AcceleratorState:
    return AcceleratorState(
        accelerator_id=accelerator_id, node_id=node_id, total_bytes=1 << 30, residents=residents
    )


def resident(deployment_id: str, state: ResidencyState = ResidencyState.LOADED) -> Resident:
    return Resident(deployment_id=deployment_id, measured_bytes=1 << 20, state=state)


def test_a_drain_targets_every_resident_of_the_nodes_accelerators_in_accelerator_order() -> None:
    accelerators = {
        "n1-gpu1": accelerator("n1-gpu1", "n1", resident("dep-c")),
        "n1-gpu0": accelerator("n1-gpu0", "n1", resident("dep-b"), resident("dep-a", ResidencyState.LOADING)),
    }
    assert drain_targets(accelerators, "n1") == [
        Copy(accelerator_id="n1-gpu0", deployment_id="dep-a"),
        Copy(accelerator_id="n1-gpu0", deployment_id="dep-b"),
        Copy(accelerator_id="n1-gpu1", deployment_id="dep-c"),
    ]


def test_a_drain_leaves_copies_already_unloading_and_other_nodes_alone() -> None:
    accelerators = {
        "n1-gpu0": accelerator("n1-gpu0", "n1", resident("going", ResidencyState.UNLOADING)),
        "n2-gpu0": accelerator("n2-gpu0", "n2", resident("elsewhere")),
    }
    assert drain_targets(accelerators, "n1") == []
