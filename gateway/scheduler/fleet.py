"""Placement across a fleet: hardware classes, where copies of a deployment are, which to prefer.

An envelope is measured on one hardware class (accelerator model, runtime, precision) and holds
there only: an accelerator of another model, or on a node without the runtime, is not a place the
measurement says anything about, so nothing is placed there by it (never a silent reuse).
"""

from __future__ import annotations

from collections.abc import Iterable

from gateway.scheduler.state import AcceleratorState, ModelEnvelope, ResidencyState

_COPIES = (ResidencyState.LOADED, ResidencyState.LOADING, ResidencyState.UNLOADING)


def accelerator_model(kind: str, name: str, compute_capability: str = "") -> str:
    """The accelerator part of a hardware class: kind and model name, and the compute capability
    where there is one (two cards of one name but other capabilities measure differently)."""
    model = f"{kind}:{name}"
    return f"{model} (sm {compute_capability})" if compute_capability else model


def measured_here(envelope: ModelEnvelope, state: AcceleratorState) -> bool:
    """Whether the envelope's measurement holds on ``state``'s hardware class (always, for an
    envelope whose class is not known: one recorded before classes were kept)."""
    measured = envelope.hardware_class
    if measured is None:
        return True
    return state.hardware_model == measured.accelerator_model and measured.runtime in state.runtimes


def holds_copy(state: AcceleratorState, deployment_id: str) -> bool:
    """A copy of the deployment is loaded, loading or still being unloaded on ``state``."""
    return any(r.deployment_id == deployment_id and r.state in _COPIES for r in state.residents)


def nodes_with_copy(accelerators: Iterable[AcceleratorState], deployment_id: str) -> frozenset[str]:
    return frozenset(state.node_id for state in accelerators if holds_copy(state, deployment_id))


def leases_of(state: AcceleratorState, deployment_id: str) -> int:
    """The requests the deployment's copy on ``state`` is serving (its load, for the warm pick)."""
    for resident in state.residents:
        if resident.deployment_id == deployment_id:
            return resident.active_leases
    return 0
