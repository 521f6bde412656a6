"""The invariant `resident + leased <= total - reserve` over decisions *and* measured outcomes.

Placement never books past capacity; a load that measures more than it reserved can. From then on
no decision grants anything on that accelerator until unloads bring the books back, and
`restore_capacity` names those unloads."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st
from sched_builders import NOW, POLICY, gib, gpu, lease, resident

from gateway.scheduler import (
    MIB,
    AcceleratorState,
    ModelEnvelope,
    PlacementRequest,
    ResidencyState,
    plan_placement,
)
from gateway.scheduler.overcommit import excess_bytes, restore_capacity
from gateway.state.accelerators import evolve_accelerator
from gateway.state.catalog import Catalog
from streams.events import serving as s
from streams.events.base import Event

AT = datetime.fromtimestamp(NOW, UTC)
CATALOG = Catalog()
# No fresh telemetry in these books: cold loads may go ahead on the books alone.
POLICY_BOOKS_ONLY = msgspec.structs.replace(
    POLICY, cold_load_requires_known_attribution=False, eviction_cooldown_seconds=0.0
)


def test_books_within_capacity_need_no_unload() -> None:
    state = gpu(total_gib=10, residents=(resident("a", 4),), leases=(lease("l1", "a", 1),))
    assert excess_bytes(state, POLICY) == 0
    assert restore_capacity(state, POLICY) == ()


def test_a_load_measured_past_its_reservation_unloads_the_cheapest_idle_resident() -> None:
    # 10 GiB, 1 GiB reserve: 9.5 GiB resident is half a GiB over.
    older = resident("old", 3, last_used_at=NOW - 600)
    newer = resident("new", 6.5, last_used_at=NOW)
    state = gpu(total_gib=10, residents=(older, newer))
    assert excess_bytes(state, POLICY) == gib(0.5)
    assert [r.deployment_id for r in restore_capacity(state, POLICY)] == ["old"]


def test_busy_and_always_warm_residents_are_never_unloaded_to_restore_capacity() -> None:
    busy = resident("busy", 3, active_leases=1, last_used_at=NOW - 900)
    pinned = resident("pinned", 3, always_warm=True, last_used_at=NOW - 900)
    newcomer = resident("new", 4, last_used_at=NOW)
    state = gpu(total_gib=10, residents=(busy, pinned, newcomer), leases=(lease("l1", "busy", 0.5),))
    assert [r.deployment_id for r in restore_capacity(state, POLICY)] == ["new"]


def test_when_no_idle_set_is_enough_every_idle_resident_goes_and_leases_ending_do_the_rest() -> None:
    idle = resident("idle", 1, last_used_at=NOW - 60)
    busy = resident("busy", 8, active_leases=1)
    state = gpu(total_gib=10, residents=(idle, busy), leases=(lease("l1", "busy", 2),))
    assert [r.deployment_id for r in restore_capacity(state, POLICY)] == ["idle"]


# ---- the property over sequences ----------------------------------------------------------------

ENVELOPES = {
    name: ModelEnvelope(
        deployment_id=name, required_bytes=size * MIB, peak_bytes=0, request_floor_bytes=16 * MIB
    )
    for name, size in (("a", 2048), ("b", 3072), ("c", 1024))
}
steps = st.one_of(
    st.tuples(st.just("request"), st.sampled_from(sorted(ENVELOPES))),
    st.tuples(st.just("loaded"), st.floats(0.5, 1.5)),  # what the agent measured, against the reservation
    st.tuples(st.just("release"), st.integers(0, 50)),
    st.tuples(st.just("restore"), st.none()),
)


def _apply(state: AcceleratorState, events: list[Event]) -> AcceleratorState:
    for event in events:
        state = evolve_accelerator(state, event, AT, CATALOG)
    return state


def _unloaded(state: AcceleratorState, victims: tuple[str, ...], reason: str) -> AcceleratorState:
    planned = s.EvictionPlanned(
        eviction_id="e",
        accelerator_id=state.accelerator_id,
        victims=victims,
        for_deployment_id="",
        required_bytes=0,
        decision_fingerprint="",
        reason=reason,
    )
    gone: list[Event] = [
        s.ResidencyUnloaded(accelerator_id=state.accelerator_id, deployment_id=v, reclaimed_bytes=0)
        for v in victims
    ]
    return _apply(state, [planned, *gone])


def _decide(state: AcceleratorState, name: str, serial: int) -> tuple[AcceleratorState, bool]:
    """One request's decision carried out on the books; whether it granted a lease or a load."""
    decision = plan_placement([state], ENVELOPES[name], PlacementRequest(), POLICY_BOOKS_ONLY, NOW)
    if not decision.verdict.admits:
        return state, False
    if decision.evictions:
        return _unloaded(state, decision.evictions, "eviction"), False
    # As serving books it (gateway.serving.capacity): a cold decision's load holds `load_bytes`, its
    # lease the rest (the request's floor); a warm one's lease all of it (`load_bytes` is 0).
    granted = s.LeaseGranted(
        lease_id=f"lease-{serial:04}",
        accelerator_id=state.accelerator_id,
        deployment_id=name,
        request_id=f"r{serial}",
        client_id="c",
        reserved_bytes=decision.required_bytes - decision.load_bytes,
        expires_at=AT,
        decision_fingerprint=decision.fingerprint,
    )
    if not decision.cold_load:
        return _apply(state, [granted]), True
    load = s.ResidencyLoadRequested(
        load_id=f"load-{serial:04}",
        accelerator_id=state.accelerator_id,
        node_id=state.node_id,
        deployment_id=name,
        required_bytes=decision.load_bytes,
        reason="request",
    )
    return _apply(state, [load, granted]), True


def _measured(state: AcceleratorState, factor: float) -> AcceleratorState:
    """The oldest load in progress reports what it measured: `factor` times its reservation."""
    loads = [item for item in state.leases if item.lease_id.startswith("load-")]
    if not loads:
        return state
    load = loads[0]
    loaded = s.ResidencyLoaded(
        load_id=load.lease_id,
        accelerator_id=state.accelerator_id,
        deployment_id=load.deployment_id,
        generation=1,
        runtime="onnxruntime",
        baseline_bytes=0,
        loaded_bytes=0,
        peak_bytes=0,
        measured_bytes=int(load.reserved_bytes * factor),
        cold_load_ms=1.0,
    )
    return _apply(state, [loaded])


@settings(max_examples=200, deadline=None)
@given(st.lists(steps, min_size=1, max_size=60))
def test_no_decision_grants_past_capacity_and_a_measurement_past_it_is_restored_by_unloads(
    plan: list[tuple[str, object]],
) -> None:
    state = gpu(total_gib=8, fresh=False)
    for serial, (kind, arg) in enumerate(plan):
        over_before = excess_bytes(state, POLICY_BOOKS_ONLY)
        if kind == "request":
            state, granted = _decide(state, str(arg), serial)
            if over_before:
                assert not granted, "granted on books over capacity"
            if granted:
                assert excess_bytes(state, POLICY_BOOKS_ONLY) == 0, "a decision booked past capacity"
        elif kind == "loaded":
            state = _measured(state, float(arg))  # type: ignore[arg-type]
        elif kind == "release":
            requests = [item for item in state.leases if item.lease_id.startswith("lease-")]
            if requests:
                gone = requests[int(arg) % len(requests)]  # type: ignore[call-overload]
                state = _apply(
                    state,
                    [
                        s.LeaseReleased(
                            lease_id=gone.lease_id, accelerator_id=state.accelerator_id, outcome="completed"
                        )
                    ],
                )
        else:
            victims = restore_capacity(state, POLICY_BOOKS_ONLY)
            state = _unloaded(state, tuple(v.deployment_id for v in victims), "over_capacity")
            if over_before and not any(r.active_leases for r in state.residents) and not state.leases:
                assert excess_bytes(state, POLICY_BOOKS_ONLY) == 0, "idle books over capacity not restored"
    # Every lease ended and the upkeep run: the books are within capacity again.
    for item in state.leases:
        if item.lease_id.startswith("lease-"):
            state = _apply(
                state,
                [
                    s.LeaseReleased(
                        lease_id=item.lease_id, accelerator_id=state.accelerator_id, outcome="completed"
                    )
                ],
            )
    while any(item.lease_id.startswith("load-") for item in state.leases):
        state = _measured(state, 1.5)
    state = _unloaded(
        state, tuple(v.deployment_id for v in restore_capacity(state, POLICY_BOOKS_ONLY)), "over_capacity"
    )
    assert all(r.state is ResidencyState.LOADED for r in state.residents)
    assert excess_bytes(state, POLICY_BOOKS_ONLY) == 0
