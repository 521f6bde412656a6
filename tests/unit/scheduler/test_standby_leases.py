"""Standby leases (`gateway.scheduler.standby`): which a replica books, renews and lets go, the
slots requests take of them, and how the use of those slots reaches the books."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st
from sched_builders import NOW, POLICY, gib, gpu, lease, resident

from gateway.scheduler import AcceleratorState, Channel, Lease, Pressure, PressureReading, ResidencyState
from gateway.scheduler.accounting import account
from gateway.scheduler.eviction import busy_deployments, eviction_candidates
from gateway.scheduler.overcommit import excess_bytes
from gateway.scheduler.standby import (
    Held,
    StandbyPlan,
    StandbySlots,
    Wanted,
    is_standby,
    plan_standby,
    standby_lease_id,
)
from gateway.serving.unloading import decide_unload
from gateway.state.accelerators import evolve_accelerator
from gateway.state.catalog import Catalog
from streams.events import serving as s

MIB_ = 1024 * 1024
PER_REQUEST = {"minilm": 64 * MIB_, "ocr": 256 * MIB_}
TTL = 300.0
WITHIN = TTL / 3


def plan(
    states: list[AcceleratorState],
    held: Sequence[Held] = (),
    in_use: dict[str, int] | None = None,
    slots: int = 4,
) -> StandbyPlan:
    return plan_standby(states, PER_REQUEST, list(held), in_use or {}, slots, POLICY, NOW, WITHIN)


def held(deployment_id: str = "minilm", acc: str = "gpu-0", slots: int = 4, expires_in: float = TTL) -> Held:
    return Held(
        lease_id=standby_lease_id(f"{acc}-{deployment_id}"),
        accelerator_id=acc,
        node_id=f"node-of-{acc}",
        deployment_id=deployment_id,
        reserved_bytes=PER_REQUEST[deployment_id] * slots,
        expires_at=NOW + expires_in,
    )


def test_a_loaded_resident_gets_one_standby_lease_of_its_slots_times_its_request_bytes() -> None:
    result = plan([gpu(residents=(resident("minilm", 1),))])
    assert result.book == (
        Wanted(
            accelerator_id="gpu-0",
            node_id="node-of-gpu-0",
            deployment_id="minilm",
            reserved_bytes=4 * 64 * MIB_,
        ),
    )


def test_a_resident_already_held_gets_no_second_standby_lease() -> None:
    assert plan([gpu(residents=(resident("minilm", 1),))], [held()]).book == ()


def test_no_standby_lease_takes_the_room_one_normal_request_still_needs() -> None:
    # 80 GiB less the reserve (4 GiB) and 75.8 GiB resident: ~0.2 GiB free, one 256 MiB request's worth
    state = gpu(residents=(resident("minilm", 1), resident("ocr", 74.8)))
    assert account(state, POLICY, NOW).schedulable_bytes < 4 * 64 * MIB_ + 256 * MIB_
    assert plan([state]).book == ()


def test_a_loading_or_unloading_resident_gets_no_standby_lease() -> None:
    for state in (ResidencyState.LOADING, ResidencyState.UNLOADING):
        assert plan([gpu(residents=(resident("minilm", 1, state=state),))]).book == ()


def test_an_unavailable_accelerator_gets_no_standby_lease_and_its_held_one_is_let_go() -> None:
    state = gpu(residents=(resident("minilm", 1),), available=False)
    result = plan([state], [held()])
    assert result.book == ()
    assert result.release == (held(),)


def test_a_standby_lease_in_use_is_kept_while_its_accelerator_is_unavailable() -> None:
    # Its node fell silent under a request: should the node be declared lost, the reconciliation
    # must find the lease on the books to end the request at once.
    state = gpu(residents=(resident("minilm", 1),), available=False)
    result = plan([state], [held()], {held().lease_id: 1})
    assert (result.book, result.renew, result.release) == ((), (), ())


def test_a_standby_lease_in_use_on_an_unavailable_accelerator_is_renewed_at_its_size_when_due() -> None:
    state = gpu(residents=(resident("minilm", 1),), available=False)
    due = held(slots=2, expires_in=WITHIN - 1)
    ((old, successor),) = plan([state], [due], {due.lease_id: 1}, slots=4).renew
    assert (old, successor.reserved_bytes) == (due, due.reserved_bytes)


def test_a_standby_lease_is_let_go_once_its_resident_is_being_unloaded() -> None:
    state = gpu(residents=(resident("minilm", 1, state=ResidencyState.UNLOADING),))
    assert plan([state], [held()], {held().lease_id: 2}).release == (held(),)


def test_a_standby_lease_whose_accelerator_left_the_view_is_let_go() -> None:
    assert plan([], [held()]).release == (held(),)


def test_a_standby_lease_is_renewed_before_it_expires_and_kept_until_then() -> None:
    state = gpu(residents=(resident("minilm", 1),))
    assert plan([state], [held(expires_in=WITHIN + 1)]) == plan([state], [held()])
    renewing = plan([state], [held(expires_in=WITHIN - 1)])
    assert [old for old, _ in renewing.renew] == [held(expires_in=WITHIN - 1)]
    assert renewing.book == ()
    assert renewing.release == ()


def test_a_standby_lease_of_another_size_is_replaced_by_one_of_the_slots_size() -> None:
    state = gpu(residents=(resident("minilm", 1),))
    ((_, successor),) = plan([state], [held(slots=2)], slots=4).renew
    assert successor.reserved_bytes == 4 * 64 * MIB_


def test_under_high_pressure_an_idle_standby_lease_is_let_go_and_none_is_booked() -> None:
    state = gpu(residents=(resident("minilm", 1),), pressure=PressureReading(level=Pressure.HIGH))
    result = plan([state], [held()])
    assert result.release == (held(),)
    assert result.book == ()


def test_a_standby_lease_in_use_is_kept_under_pressure() -> None:
    state = gpu(residents=(resident("minilm", 1),), pressure=PressureReading(level=Pressure.HIGH))
    assert plan([state], [held()], {held().lease_id: 1}).release == ()


def test_slots_zero_books_nothing_and_lets_every_held_lease_go() -> None:
    result = plan([gpu(residents=(resident("minilm", 1),))], [held()], slots=0)
    assert result.book == ()
    assert result.release == (held(),)


def test_a_standby_lease_leaves_its_resident_evictable_and_unloadable() -> None:
    standby = Lease(lease_id=standby_lease_id("x"), deployment_id="minilm", reserved_bytes=gib(0.25))
    state = gpu(residents=(resident("minilm", 1),), leases=(standby,))
    assert busy_deployments(state) == frozenset()
    assert [r.deployment_id for r in eviction_candidates(state, Channel.PRODUCTION)] == ["minilm"]
    assert decide_unload(state, "minilm", "operator") is not None


def test_a_request_lease_still_makes_its_resident_busy() -> None:
    state = gpu(residents=(resident("minilm", 1),), leases=(lease("l1", "minilm", 0.25),))
    assert busy_deployments(state) == {"minilm"}
    assert decide_unload(state, "minilm", "operator") is None


def _standby_grant(lease_id: str, expires_at: datetime, used_at: datetime | None = None) -> s.LeaseGranted:
    return s.LeaseGranted(
        lease_id=lease_id,
        accelerator_id="gpu-0",
        deployment_id="minilm",
        request_id="",
        client_id="standby:gw-1",
        reserved_bytes=gib(0.25),
        expires_at=expires_at,
        decision_fingerprint="standby",
        used_at=used_at,
    )


def test_the_live_view_counts_a_standby_lease_as_booked_bytes_but_not_as_a_use() -> None:
    at = datetime.fromtimestamp(NOW, UTC)
    before = gpu(residents=(resident("minilm", 1, last_used_at=NOW - 100),))
    grant = _standby_grant(standby_lease_id("y"), at)
    after = evolve_accelerator(before, grant, at, Catalog())
    assert [item.lease_id for item in after.leases] == [grant.lease_id]
    assert after.residents[0].active_leases == 0
    assert after.residents[0].last_used_at == NOW - 100
    released = evolve_accelerator(
        after,
        s.LeaseReleased(lease_id=grant.lease_id, accelerator_id="gpu-0", outcome="completed"),
        at,
        Catalog(),
    )
    assert released.leases == ()
    assert released.residents == before.residents


def test_a_standby_renewal_that_carries_a_use_puts_it_on_the_books_but_keeps_the_resident_idle() -> None:
    at = datetime.fromtimestamp(NOW, UTC)
    before = gpu(residents=(resident("minilm", 1, last_used_at=NOW - 100),))
    renewal = _standby_grant(standby_lease_id("z"), at, used_at=datetime.fromtimestamp(NOW - 3, UTC))
    after = evolve_accelerator(before, renewal, at, Catalog())
    assert after.residents[0].last_used_at == NOW - 3
    assert after.residents[0].active_leases == 0
    assert busy_deployments(after) == frozenset()


def test_a_used_standby_lease_is_renewed_with_its_last_use_once_it_is_old_enough_to_record() -> None:
    young = msgspec.structs.replace(held(), granted_at=NOW - 5)
    old = msgspec.structs.replace(held(), granted_at=NOW - 10)
    state = gpu(residents=(resident("minilm", 1),))

    def renewals(lease: Held, used: dict[str, float]) -> tuple[tuple[Held, Wanted], ...]:
        return plan_standby([state], PER_REQUEST, [lease], {}, 4, POLICY, NOW, WITHIN, used, 10.0).renew

    assert renewals(old, {}) == ()  # not used since its grant: nothing to record
    assert renewals(young, {young.lease_id: NOW - 1}) == ()  # recorded once 10 s old
    ((renewed, successor),) = renewals(old, {old.lease_id: NOW - 1})
    assert renewed == old
    assert successor.used_at == NOW - 1
    assert successor.reserved_bytes == old.reserved_bytes


def test_a_slot_taken_is_a_use_to_record_and_the_first_since_the_grant_is_announced_once() -> None:
    slots = StandbySlots(2)
    heard: list[None] = []
    slots.on_first_use = lambda: heard.append(None)
    old, new = held(), msgspec.structs.replace(held(), lease_id=standby_lease_id("new"))
    slots.hold(old)
    slots.take("minilm", at=NOW - 2)
    slots.take("minilm", at=NOW - 1)
    assert slots.unrecorded_use == {old.lease_id: NOW - 1}
    assert len(heard) == 1
    slots.renewed(old.lease_id, new)  # its successor's grant carried the use
    assert slots.unrecorded_use == {}
    slots.give_back(old.lease_id)
    slots.take("minilm", at=NOW)
    assert slots.unrecorded_use == {new.lease_id: NOW}
    assert len(heard) == 2


def test_only_ids_with_the_standby_prefix_are_standby_leases() -> None:
    assert is_standby(standby_lease_id("abc"))
    assert not is_standby("abc")


def test_a_request_takes_a_slot_until_the_lease_has_none_free() -> None:
    slots = StandbySlots(2)
    slots.hold(held())
    assert slots.take("minilm") == held()
    assert slots.take("minilm") == held()
    assert slots.take("minilm") is None
    slots.give_back(held().lease_id)
    assert slots.take("minilm") == held()


def test_no_slot_is_taken_of_a_lease_on_the_avoided_accelerator_or_one_not_usable() -> None:
    slots = StandbySlots(2)
    slots.hold(held())
    assert slots.take("minilm", avoid="gpu-0") is None
    assert slots.take("minilm", usable=lambda _: False) is None
    assert slots.take("ocr") is None


def test_a_renewed_lease_inherits_the_slots_in_use() -> None:
    slots = StandbySlots(2)
    old, new = held(), msgspec.structs.replace(held(), lease_id=standby_lease_id("new"))
    slots.hold(old)
    assert slots.take("minilm") == old
    slots.renewed(old.lease_id, new)
    assert slots.free(new.lease_id) == 1
    slots.give_back(old.lease_id)  # the request that took the old lease's slot ends
    assert slots.free(new.lease_id) == 2


_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("take"), st.sampled_from(["minilm", "ocr"])),
        st.tuples(st.just("end"), st.integers(0, 50)),
        st.tuples(st.just("renew"), st.integers(0, 50)),
        st.tuples(st.just("drop"), st.integers(0, 50)),
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(slots=st.integers(1, 4), ops=_OPS)
def test_never_more_requests_run_under_a_lease_and_its_successors_than_it_has_slots(
    slots: int, ops: list[tuple[str, object]]
) -> None:
    book = StandbySlots(slots)
    for deployment_id in ("minilm", "ocr"):
        book.hold(held(deployment_id))
    running: list[str] = []  # the lease id each running request took
    renewals = 0
    for op, arg in ops:
        if op == "take":
            taken = book.take(str(arg))
            if taken is not None:
                running.append(taken.lease_id)
        elif op == "end" and running:
            book.give_back(running.pop(int(str(arg)) % len(running)))
        elif op == "renew" and book.held:
            old = sorted(book.held)[int(str(arg)) % len(book.held)]
            renewals += 1
            book.renewed(
                old, msgspec.structs.replace(book.held[old], lease_id=standby_lease_id(f"r{renewals}"))
            )
        elif op == "drop" and book.held:
            book.drop(sorted(book.held)[int(str(arg)) % len(book.held)])
        for lease_id in book.held:
            assert 0 <= book.free(lease_id) <= slots
        assert sum(book.in_use.values()) == len(running)
        for deployment_id in ("minilm", "ocr"):
            alive = [h for h in book.held.values() if h.deployment_id == deployment_id]
            assert all(book.in_use.get(h.lease_id, 0) <= slots for h in alive)


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.floats(0.1, 30), min_size=1, max_size=4),
    leased=st.floats(0, 20),
    slots=st.integers(1, 8),
)
def test_booking_what_the_plan_says_never_over_commits_and_leaves_room_for_a_request(
    sizes: list[float], leased: float, slots: int
) -> None:
    names = ["minilm", "ocr", "minilm", "ocr"]
    residents = tuple(
        {names[i] + str(i): resident(names[i] + str(i), size) for i, size in enumerate(sizes)}.values()
    )
    per_request = {r.deployment_id: PER_REQUEST[r.deployment_id.rstrip("0123")] for r in residents}
    state = gpu(residents=residents, leases=(lease("l1", residents[0].deployment_id, leased),))
    if excess_bytes(state, POLICY):
        return  # books already over capacity: nothing is booked there (the upkeep unloads)
    result = plan_standby([state], per_request, [], {}, slots, POLICY, NOW, WITHIN)
    booked = tuple(
        Lease(
            lease_id=standby_lease_id(str(i)), deployment_id=w.deployment_id, reserved_bytes=w.reserved_bytes
        )
        for i, w in enumerate(result.book)
    )
    after = msgspec.structs.replace(state, leases=(*state.leases, *booked))
    assert excess_bytes(after, POLICY) == 0
    if booked:
        assert account(after, POLICY, NOW).schedulable_bytes >= max(per_request.values())


def test_a_slot_given_back_calls_each_waiter_once() -> None:
    slots = StandbySlots(1)
    slots.hold(held())
    assert slots.take("minilm") == held()
    called: list[str] = []
    slots.on_free(lambda: called.append("first"))
    slots.on_free(lambda: called.append("second"))
    slots.give_back(held().lease_id)
    slots.give_back(held().lease_id)  # (nothing was taken: no waiter left to call)
    assert called == ["first", "second"]
    assert slots.free(held().lease_id) == 1
