"""Placement across a fleet, checked over generated fleets:

- nothing is placed where the envelope's hardware class was not measured;
- copies of one deployment, and requests on them, never book an accelerator past capacity;
- a further copy goes to a node without one whenever one can take it (``min`` copies on distinct
  nodes when they fit).
"""

from __future__ import annotations

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st
from sched_builders import NOW, POLICY

from gateway.scheduler import (
    MIB,
    AcceleratorState,
    Lease,
    ModelEnvelope,
    PlacementDecision,
    PlacementRequest,
    ReasonCode,
    ResidencyState,
    Resident,
    account,
    plan_placement,
)
from gateway.scheduler.fleet import holds_copy, measured_here, nodes_with_copy
from gateway.scheduler.state import HardwareClass

MODELS = ("gpu:H100 (sm 9.0)", "gpu:L4 (sm 8.9)", "cpu:x86_64")
RUNTIMES = ("onnxruntime-gpu", "tensorrt", "onnxruntime-cpu")
OTHERS = [f"other{i}" for i in range(4)]
TARGET = "replicated"
mib = st.integers(min_value=0, max_value=8 * 1024).map(lambda n: n * MIB)


@st.composite
def accelerators(draw: st.DrawFn) -> tuple[AcceleratorState, ...]:
    """One to four nodes of one or two accelerators, each partly taken by other deployments."""
    out = []
    for node in range(draw(st.integers(1, 4))):
        for index in range(draw(st.integers(1, 2))):
            total = draw(st.integers(4, 24)) * 1024 * MIB
            names = draw(st.lists(st.sampled_from(OTHERS), unique=True, max_size=3))
            residents = tuple(
                Resident(
                    deployment_id=name,
                    measured_bytes=draw(mib) // 4,
                    active_leases=draw(st.sampled_from([0, 0, 1])),
                    last_used_at=NOW - 60,
                )
                for name in names
            )
            attributed = sum(r.measured_bytes for r in residents)
            out.append(
                AcceleratorState(
                    accelerator_id=f"acc-{node}-{index}",
                    node_id=f"node-{node}",
                    total_bytes=total,
                    observed_used_bytes=attributed,
                    observed_at=NOW - 1,
                    residents=residents,
                    hardware_model=draw(st.sampled_from(MODELS)),
                    runtimes=tuple(draw(st.lists(st.sampled_from(RUNTIMES), unique=True, min_size=1))),
                )
            )
    return tuple(out)


@st.composite
def envelopes(draw: st.DrawFn) -> ModelEnvelope:
    measured = draw(
        st.none()
        | st.builds(HardwareClass, st.sampled_from(MODELS), st.sampled_from(RUNTIMES), st.just("fp16"))
    )
    required = draw(st.integers(256, 6 * 1024)) * MIB
    return ModelEnvelope(
        deployment_id=TARGET,
        required_bytes=required,
        peak_bytes=required,
        request_floor_bytes=64 * MIB,
        hardware_class=measured,
        spread=draw(st.booleans()),
    )


def _booked(state: AcceleratorState) -> int:
    return sum(r.measured_bytes for r in state.residents) + sum(x.reserved_bytes for x in state.leases)


def _capacity(state: AcceleratorState) -> int:
    budget = account(state, POLICY, NOW)
    return budget.total_bytes - budget.safety_reserve_bytes


def _apply(fleet: dict[str, AcceleratorState], decision: PlacementDecision, step: int) -> None:
    """The decision carried out: evictions done, then the copy loaded (measured at what it
    reserved) or the request's lease granted; telemetry sees the residents."""
    assert decision.accelerator_id is not None
    state = fleet[decision.accelerator_id]
    residents = [r for r in state.residents if r.deployment_id not in decision.evictions]
    leases = list(state.leases)
    if decision.cold_load:
        residents.append(Resident(deployment_id=TARGET, measured_bytes=decision.required_bytes))
    else:
        leases.append(
            Lease(lease_id=f"l{step}", deployment_id=TARGET, reserved_bytes=decision.required_bytes)
        )
        residents = [
            msgspec.structs.replace(r, active_leases=r.active_leases + 1) if r.deployment_id == TARGET else r
            for r in residents
        ]
    fleet[state.accelerator_id] = msgspec.structs.replace(
        state,
        residents=tuple(residents),
        leases=tuple(leases),
        observed_used_bytes=sum(r.measured_bytes for r in residents),
    )


@settings(max_examples=150, deadline=None)
@given(accelerators(), envelopes(), st.lists(st.booleans(), min_size=1, max_size=8))
def test_nothing_is_placed_where_the_envelopes_class_is_unmeasured(
    initial: tuple[AcceleratorState, ...], envelope: ModelEnvelope, replicas: list[bool]
) -> None:
    fleet = {state.accelerator_id: state for state in initial}
    for step, new_replica in enumerate(replicas):
        decision = plan_placement(
            list(fleet.values()), envelope, PlacementRequest(new_replica=new_replica), POLICY, NOW
        )
        if not any(measured_here(envelope, state) for state in fleet.values()):
            assert decision.reason_codes == (ReasonCode.ENVELOPE_CLASS_UNMEASURED,)
        if decision.accelerator_id is not None and decision.verdict.admits:
            assert measured_here(envelope, fleet[decision.accelerator_id])
            _apply(fleet, decision, step)


@settings(max_examples=150, deadline=None)
@given(accelerators(), envelopes(), st.lists(st.booleans(), min_size=1, max_size=12))
def test_copies_and_their_requests_never_book_an_accelerator_past_capacity(
    initial: tuple[AcceleratorState, ...], envelope: ModelEnvelope, replicas: list[bool]
) -> None:
    fleet = {state.accelerator_id: state for state in initial}
    for step, new_replica in enumerate(replicas):
        before = {key: _booked(state) > _capacity(state) for key, state in fleet.items()}
        decision = plan_placement(
            list(fleet.values()), envelope, PlacementRequest(new_replica=new_replica), POLICY, NOW
        )
        if decision.accelerator_id is None or not decision.verdict.admits:
            continue
        # On books already over, a grant comes only with evictions that restore them (checked below).
        assert not before[decision.accelerator_id] or decision.evictions
        _apply(fleet, decision, step)
        chosen = fleet[decision.accelerator_id]
        assert _booked(chosen) <= _capacity(chosen)
        copies = [state for state in fleet.values() if holds_copy(state, TARGET)]
        assert all(sum(r.deployment_id == TARGET for r in s.residents) == 1 for s in copies)


@settings(max_examples=150, deadline=None)
@given(accelerators(), envelopes(), st.integers(1, 6))
def test_a_further_copy_goes_to_a_node_without_one_whenever_one_can_take_it(
    initial: tuple[AcceleratorState, ...], envelope: ModelEnvelope, wanted: int
) -> None:
    fleet = {state.accelerator_id: state for state in initial}
    for step in range(wanted):
        crowded = nodes_with_copy(fleet.values(), TARGET)
        decision = plan_placement(
            list(fleet.values()), envelope, PlacementRequest(new_replica=True), POLICY, NOW
        )
        if decision.accelerator_id is None or not decision.verdict.admits:
            return
        if decision.node_id in crowded:
            elsewhere = tuple(s.accelerator_id for s in fleet.values() if s.node_id not in crowded)
            if elsewhere:
                only_there = PlacementRequest(new_replica=True, accelerator_ids=elsewhere)
                alternative = plan_placement(list(fleet.values()), envelope, only_there, POLICY, NOW)
                assert not alternative.verdict.admits
        _apply(fleet, decision, step)


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 4), st.booleans())
def test_min_copies_land_on_distinct_nodes_when_each_node_has_room(nodes: int, spread: bool) -> None:
    fleet = {
        f"acc-{n}": AcceleratorState(
            accelerator_id=f"acc-{n}",
            node_id=f"node-{n // 2}",
            total_bytes=16 * 1024 * MIB,
            observed_used_bytes=0,
            observed_at=NOW - 1,
        )
        for n in range(nodes * 2)
    }
    envelope = ModelEnvelope(
        deployment_id=TARGET, required_bytes=1024 * MIB, peak_bytes=1024 * MIB, spread=spread
    )
    for step in range(nodes):
        decision = plan_placement(
            list(fleet.values()), envelope, PlacementRequest(new_replica=True), POLICY, NOW
        )
        assert decision.verdict.admits
        _apply(fleet, decision, step)
    assert len(nodes_with_copy(fleet.values(), TARGET)) == nodes
    assert all(r.state is ResidencyState.LOADED for s in fleet.values() for r in s.residents)
