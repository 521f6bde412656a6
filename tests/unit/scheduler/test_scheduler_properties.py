"""Invariants of placement, checked over generated fleets.

- never admits past capacity, evictions included;
- never evicts a busy, always-warm or not-loaded resident, nor production for lab;
- evicts no more than needed;
- the same inputs give the same decision and fingerprint, however the inputs are ordered;
- skipping accelerators whose eviction cost floor cannot win changes no decision.
"""

from __future__ import annotations

import random

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st
from sched_builders import NOW, POLICY, apply

from gateway.scheduler import (
    MIB,
    AcceleratorState,
    Channel,
    CoResidencyPair,
    CoResidencyStatus,
    Lease,
    ModelEnvelope,
    PlacementRequest,
    Pressure,
    PressureReading,
    ResidencyState,
    Resident,
    SchedulerPolicy,
    Verdict,
    account,
    choose_evictions,
    plan_placement,
)
from gateway.scheduler.eviction import eviction_candidates, eviction_cost_floor

DEPLOYMENTS = [f"d{i}" for i in range(8)]
mib = st.integers(min_value=0, max_value=16 * 1024).map(lambda n: n * MIB)


def mostly(common: object, *rare: object) -> st.SearchStrategy[object]:
    """``common`` three times in four, else one of ``rare``: keeps interesting paths reachable."""
    return st.sampled_from([common, common, common, common, common, common, *rare])


@st.composite
def residents(draw: st.DrawFn) -> tuple[Resident, ...]:
    names = draw(st.lists(st.sampled_from(DEPLOYMENTS), unique=True, min_size=1, max_size=8))
    return tuple(
        Resident(
            deployment_id=name,
            measured_bytes=draw(mib),
            state=draw(mostly(ResidencyState.LOADED, ResidencyState.LOADING, ResidencyState.UNLOADING)),
            active_leases=draw(mostly(0, 1, 2)),
            always_warm=draw(mostly(False, True)),
            channel=draw(st.sampled_from(Channel)),
            last_used_at=NOW - draw(st.integers(0, 3600)),
            reload_cost_ms=float(draw(st.integers(0, 20_000))),
        )
        for name in names
    )


@st.composite
def accelerators(draw: st.DrawFn, index: int) -> AcceleratorState:
    held = draw(residents())
    leases = tuple(
        Lease(
            lease_id=f"l{index}-{n}",
            deployment_id=draw(st.sampled_from(DEPLOYMENTS)),
            reserved_bytes=(reserved := draw(st.integers(0, 2048)) * MIB),
            materialised_bytes=draw(st.integers(0, 2048)) * MIB % (reserved + 1),
        )
        for n in range(draw(st.integers(0, 3)))
    )
    attributed = sum(item.measured_bytes for item in held) + sum(item.materialised_bytes for item in leases)
    observed = draw(st.integers(-2048, 6 * 1024).map(lambda n: max(0, attributed + n * MIB)) | st.none())
    return AcceleratorState(
        accelerator_id=f"gpu-{index}",
        node_id=f"node-{index // 2}",
        total_bytes=draw(st.sampled_from([8, 16, 24, 40, 48, 80])) * 1024 * MIB,
        observed_used_bytes=observed,
        observed_at=None if observed is None else NOW - draw(mostly(1.0, 0.0, 30.0)),
        residents=held,
        leases=leases,
        pressure=PressureReading(
            level=draw(mostly(Pressure.NORMAL, *Pressure)), since=NOW - draw(st.sampled_from([0.0, 100.0]))
        ),
        last_eviction_at=draw(mostly(None, NOW - 5.0, NOW - 120.0)),
        available=draw(mostly(True, False)),
    )


@st.composite
def scenarios(
    draw: st.DrawFn,
) -> tuple[
    tuple[AcceleratorState, ...],
    ModelEnvelope,
    PlacementRequest,
    SchedulerPolicy,
    tuple[CoResidencyPair, ...],
]:
    fleet = tuple(draw(accelerators(index)) for index in range(draw(st.integers(1, 4))))
    name = draw(st.sampled_from([*DEPLOYMENTS, "new"]))
    peak = draw(mib)
    envelope = ModelEnvelope(
        deployment_id=name,
        required_bytes=draw(mib.map(lambda n: n + n // 2)),
        peak_bytes=peak,
        request_floor_bytes=draw(st.integers(0, 1024)) * MIB,
        channel=draw(mostly(Channel.PRODUCTION, Channel.LAB)),
        cold_load_ms=float(draw(st.integers(0, 20_000))),
    )
    request = PlacementRequest(
        channel=envelope.channel,
        deadline_ms=draw(st.none() | st.floats(0.0, 60_000.0)),
        queue_depth=draw(mostly(0, 63, 64, 80)),
        queued=draw(st.booleans()),
    )
    policy = msgspec.structs.replace(POLICY, cold_load_requires_known_attribution=draw(st.booleans()))
    pairs = tuple(
        CoResidencyPair(left=name, right=other, status=draw(st.sampled_from(CoResidencyStatus)))
        for other in draw(st.lists(st.sampled_from(DEPLOYMENTS), unique=True, max_size=3))
        if other != name
    )
    return fleet, envelope, request, policy, pairs


@st.composite
def crowded(
    draw: st.DrawFn,
) -> tuple[
    tuple[AcceleratorState, ...],
    ModelEnvelope,
    PlacementRequest,
    SchedulerPolicy,
    tuple[CoResidencyPair, ...],
]:
    """A cold model that fits nowhere as is: placement has to weigh evictions."""
    fleet, envelope, request, policy, pairs = draw(scenarios())
    calm = tuple(
        msgspec.structs.replace(
            item,
            observed_at=NOW - 1.0 if item.observed_used_bytes is not None else None,
            pressure=PressureReading(),
            last_eviction_at=None,
            available=True,
        )
        for item in fleet
    )
    roomiest = max(account(item, policy, NOW).schedulable_bytes for item in calm)
    lacking = draw(st.integers(1, 12 * 1024)) * MIB
    needed = max(0, roomiest) + lacking
    cold = msgspec.structs.replace(envelope, deployment_id="new", required_bytes=needed, peak_bytes=0)
    pairs = tuple(msgspec.structs.replace(pair, left="new") for pair in pairs)
    return calm, cold, request, policy, pairs


Scenario = tuple[
    tuple[AcceleratorState, ...],
    ModelEnvelope,
    PlacementRequest,
    SchedulerPolicy,
    tuple[CoResidencyPair, ...],
]


def held_bytes(state: AcceleratorState, policy: SchedulerPolicy) -> int:
    """What ``state`` holds and keeps back, from DESIGN §6 alone (not the product's ``account``, so
    that a bug there cannot hide here): the larger of the hardware's count and what we placed,
    plus bytes leased but not yet in use, plus the safety reserve."""
    resident = sum(item.measured_bytes for item in state.residents)
    materialised = sum(min(item.materialised_bytes, item.reserved_bytes) for item in state.leases)
    leased = sum(item.reserved_bytes for item in state.leases) - materialised
    in_use = max(state.observed_used_bytes or 0, resident + materialised)
    reserve = max(policy.safety_reserve_min_bytes, int(state.total_bytes * policy.safety_reserve_fraction))
    return in_use + leased + reserve


@settings(max_examples=100)
@given(scenarios() | crowded())
def test_never_admits_past_capacity_even_after_eviction(scenario: Scenario) -> None:
    fleet, envelope, request, policy, pairs = scenario
    decision = plan_placement(fleet, envelope, request, policy, NOW, pairs)
    if not decision.verdict.admits:
        return
    placed = apply(decision, fleet, envelope.deployment_id)
    assert held_bytes(placed, policy) <= placed.total_bytes
    assert account(placed, policy, NOW).schedulable_bytes == decision.headroom_after_bytes


@settings(max_examples=100)
@given(scenarios() | crowded())
def test_never_evicts_a_busy_always_warm_or_transitional_resident(scenario: Scenario) -> None:
    fleet, envelope, request, policy, pairs = scenario
    decision = plan_placement(fleet, envelope, request, policy, NOW, pairs)
    if not decision.evictions:
        return
    assert decision.verdict is Verdict.ADMIT_AFTER_EVICTION
    chosen = next(item for item in fleet if item.accelerator_id == decision.accelerator_id)
    leased = {item.deployment_id for item in chosen.leases}
    by_id = {item.deployment_id: item for item in chosen.residents}
    for name in decision.evictions:
        victim = by_id[name]
        assert victim.active_leases == 0
        assert name not in leased
        assert not victim.always_warm
        assert victim.state is ResidencyState.LOADED
        assert name != envelope.deployment_id
        assert request.channel is Channel.PRODUCTION or victim.channel is Channel.LAB


@settings(max_examples=100)
@given(crowded())
def test_evicts_no_more_than_needed(scenario: Scenario) -> None:
    fleet, envelope, request, policy, pairs = scenario
    decision = plan_placement(fleet, envelope, request, policy, NOW, pairs)
    if not decision.evictions:
        return
    assert decision.budget is not None
    unsafe = {pair.right for pair in pairs if pair.status is CoResidencyStatus.PROVEN_UNSAFE}
    chosen = next(item for item in fleet if item.accelerator_id == decision.accelerator_id)
    sizes = {item.deployment_id: item.measured_bytes for item in chosen.residents}
    headroom = decision.budget.schedulable_bytes + decision.reclaimed_bytes
    for name in decision.evictions:
        if name in unsafe:
            continue  # must go whatever the room: a PROVEN_UNSAFE partner
        assert headroom - sizes[name] < decision.required_bytes


@settings(max_examples=100)
@given(scenarios() | crowded(), st.randoms(use_true_random=False))
def test_same_inputs_give_the_same_decision_whatever_their_order(
    scenario: Scenario, rng: random.Random
) -> None:
    fleet, envelope, request, policy, pairs = scenario
    first = plan_placement(fleet, envelope, request, policy, NOW, pairs)
    again = plan_placement(fleet, envelope, request, policy, NOW, pairs)
    assert again == first

    shuffled_fleet = [
        msgspec.structs.replace(
            item,
            residents=tuple(rng.sample(item.residents, len(item.residents))),
            leases=tuple(rng.sample(item.leases, len(item.leases))),
        )
        for item in fleet
    ]
    rng.shuffle(shuffled_fleet)
    shuffled_pairs = [CoResidencyPair(left=p.right, right=p.left, status=p.status) for p in reversed(pairs)]
    assert plan_placement(shuffled_fleet, envelope, request, policy, NOW, shuffled_pairs) == first


@st.composite
def crowded_twins(draw: st.DrawFn) -> Scenario:
    """A crowded fleet plus copies of its accelerators under later ids: plans tie, so the
    planner may skip a copy only if it really cannot beat the original."""
    fleet, envelope, request, policy, pairs = draw(crowded())
    copies = draw(st.lists(st.sampled_from(fleet), min_size=1, max_size=3))
    twins = tuple(
        msgspec.structs.replace(item, accelerator_id=f"gpu-{len(fleet) + n}") for n, item in enumerate(copies)
    )
    return fleet + twins, envelope, request, policy, pairs


def reference_cost(chosen: AcceleratorState, evictions: tuple[str, ...]) -> tuple[int, float, int]:
    """Production victims, reload ms (summed in eviction order), count: cheapest wins."""
    by_id = {item.deployment_id: item for item in chosen.residents}
    production, reload_ms = 0, 0.0
    for name in evictions:
        production += by_id[name].channel is Channel.PRODUCTION
        reload_ms += by_id[name].reload_cost_ms
    return (production, reload_ms, len(evictions))


@settings(max_examples=200)
@given(crowded() | crowded_twins())
def test_eviction_choice_matches_planning_every_accelerator(scenario: Scenario) -> None:
    """Reference: place on each accelerator alone (nothing to skip), then take the cheapest
    (cost, headroom after), the first in id order on a tie."""
    fleet, envelope, request, policy, pairs = scenario
    decision = plan_placement(fleet, envelope, request, policy, NOW, pairs)
    best: tuple[tuple[tuple[int, float, int], int], str, tuple[str, ...]] | None = None
    for item in sorted(fleet, key=lambda state: state.accelerator_id):
        alone = plan_placement((item,), envelope, request, policy, NOW, pairs)
        assert alone.verdict is not Verdict.ADMIT  # crowded: nothing fits as is
        if alone.verdict is Verdict.ADMIT_AFTER_EVICTION:
            assert alone.headroom_after_bytes is not None
            key = (reference_cost(item, alone.evictions), alone.headroom_after_bytes)
            if best is None or key < best[0]:
                best = (key, item.accelerator_id, alone.evictions)
    if best is None:
        assert decision.verdict is not Verdict.ADMIT_AFTER_EVICTION
        assert decision.evictions == ()
        return
    assert decision.verdict is Verdict.ADMIT_AFTER_EVICTION
    assert (decision.accelerator_id, decision.evictions) == best[1:]


@settings(max_examples=200)
@given(scenarios(), st.integers(1, 24 * 1024).map(lambda n: n * MIB))
def test_the_eviction_cost_floor_never_exceeds_the_plan(scenario: Scenario, deficit: int) -> None:
    fleet, envelope, request, _, _ = scenario
    for state in fleet:
        floor = eviction_cost_floor(state, request.channel, envelope.deployment_id, (), deficit)
        candidates = eviction_candidates(state, request.channel, envelope.deployment_id)
        plan = choose_evictions(candidates, deficit, ordered=True)
        if floor is None or plan is None:
            continue
        freed = sum(item.measured_bytes for item in plan)
        assert floor <= (reference_cost(state, tuple(item.deployment_id for item in plan)), freed - deficit)
