"""Placement verdicts, one behaviour each.

Default policy throughout: reserve = max(1 GiB, 5 %) (80 GiB -> 4 GiB, 24 GiB -> 1.2 GiB), and the
default test model needs 10 GiB cold (measured 10 GiB > peak 8 GiB + 1.05 GiB margin).
"""

from __future__ import annotations

import msgspec
from sched_builders import NOW, POLICY, ask, gib, gpu, lease, model, resident

from gateway.scheduler import (
    Channel,
    CoResidencyPair,
    CoResidencyStatus,
    Pressure,
    PressureReading,
    ReasonCode,
    ResidencyState,
    Verdict,
    account,
    plan_placement,
    required_bytes,
    safety_reserve,
)

R = ReasonCode
FLOOR = required_bytes(model(), True, POLICY)  # a request's execution floor on a resident model
LAB, PROD = Channel.LAB, Channel.PRODUCTION


def test_a_resident_model_runs_where_it_is_loaded_with_only_the_execution_floor() -> None:
    fleet = (gpu("gpu-0", residents=(resident("embed", 4),)), gpu("gpu-1"))
    decision = plan_placement(fleet, model("embed"), ask(), POLICY, NOW)

    assert decision.verdict is Verdict.ADMIT
    assert decision.accelerator_id == "gpu-0"
    assert decision.node_id == "node-of-gpu-0"
    assert decision.reason_codes == (R.RESIDENT_WARM,)
    assert decision.required_bytes == POLICY.request_execution_floor_bytes
    assert not decision.cold_load


def test_among_replicas_the_one_with_most_headroom_serves() -> None:
    fleet = (
        gpu("gpu-0", residents=(resident("embed", 4), resident("other", 40))),
        gpu("gpu-1", residents=(resident("embed", 4),)),
    )
    assert plan_placement(fleet, model("embed"), ask(), POLICY, NOW).accelerator_id == "gpu-1"


def test_a_cold_model_goes_where_it_fits_best() -> None:
    fleet = (
        gpu("gpu-a", residents=(resident("x", 50),)),  # 26 GiB schedulable
        gpu("gpu-b", total_gib=24),  # 22.8 GiB schedulable: tightest fit
        gpu("gpu-c"),  # 76 GiB schedulable
    )
    decision = plan_placement(fleet, model(), ask(), POLICY, NOW)

    assert decision.verdict is Verdict.ADMIT
    assert decision.accelerator_id == "gpu-b"
    assert decision.reason_codes == (R.COLD_LOAD,)
    # the load's reservation, and beside it the request's own lease of the execution floor
    assert (decision.load_bytes, decision.required_bytes) == (gib(10), gib(10) + FLOOR)
    assert decision.headroom_after_bytes == gib(24) - safety_reserve(gib(24), POLICY) - gib(10) - FLOOR
    assert decision.cold_load


def test_idle_residents_are_evicted_to_make_room_cheapest_first() -> None:
    # 24 GiB: 1.2 reserve + 16 resident leaves 6.8 GiB; 10 GiB needed, so 3.2 GiB must go.
    fleet = (
        gpu(
            total_gib=24,
            residents=(
                resident("lab-old", 8, channel=LAB, last_used_at=NOW - 600),
                resident("prod-older", 8, channel=PROD, last_used_at=NOW - 900),
            ),
        ),
    )
    decision = plan_placement(fleet, model(), ask(), POLICY, NOW)

    assert decision.verdict is Verdict.ADMIT_AFTER_EVICTION
    assert decision.evictions == ("lab-old",)
    assert decision.reclaimed_bytes == gib(8)
    assert (
        decision.headroom_after_bytes
        == gib(24) - safety_reserve(gib(24), POLICY) - gib(16) + gib(8) - gib(10) - FLOOR
    )
    assert decision.reason_codes == (R.COLD_LOAD, R.EVICTION_REQUIRED)


def test_an_accelerator_with_room_beats_one_that_needs_evictions() -> None:
    fleet = (
        gpu("gpu-a", total_gib=24, residents=(resident("idle", 16, channel=LAB),)),
        gpu("gpu-b", total_gib=24, residents=(resident("busy", 2, active_leases=1),)),
    )
    decision = plan_placement(fleet, model(), ask(), POLICY, NOW)
    assert (decision.verdict, decision.accelerator_id) == (Verdict.ADMIT, "gpu-b")


def test_the_accelerator_with_the_cheapest_eviction_set_wins() -> None:
    fleet = (
        gpu("gpu-a", total_gib=24, residents=(resident("prod", 16, channel=PROD),)),
        gpu("gpu-b", total_gib=24, residents=(resident("lab", 16, channel=LAB),)),
    )
    decision = plan_placement(fleet, model(), ask(), POLICY, NOW)
    assert (decision.accelerator_id, decision.evictions) == ("gpu-b", ("lab",))


def test_always_warm_residents_are_never_evicted() -> None:
    fleet = (
        gpu(
            total_gib=24,
            residents=(resident("warm-a", 8, always_warm=True), resident("warm-b", 8, always_warm=True)),
        ),
    )
    decision = plan_placement(fleet, model(), ask(), POLICY, NOW)

    assert decision.verdict is Verdict.REJECT_INSUFFICIENT_CAPACITY
    assert decision.reason_codes == (R.INSUFFICIENT_SCHEDULABLE_VRAM, R.INSUFFICIENT_VRAM_AFTER_EVICTION)
    assert decision.evictions == ()


def test_a_lab_request_does_not_evict_production_residents() -> None:
    fleet = (gpu(total_gib=24, residents=(resident("prod", 16, channel=PROD),)),)
    decision = plan_placement(fleet, model(channel=LAB), ask(channel=LAB), POLICY, NOW)
    assert decision.verdict is Verdict.REJECT_INSUFFICIENT_CAPACITY


def test_it_queues_when_room_appears_once_in_flight_work_finishes() -> None:
    # The only resident is busy: not evictable now, but it will be idle once its lease ends.
    fleet = (
        gpu(
            total_gib=24,
            residents=(resident("busy", 14, active_leases=1),),
            leases=(lease("l1", "busy", 2),),
        ),
    )
    decision = plan_placement(fleet, model(), ask(deadline_ms=30_000.0), POLICY, NOW)

    assert decision.verdict is Verdict.QUEUE
    assert decision.accelerator_id == "gpu-0"
    assert decision.reason_codes == (R.INSUFFICIENT_VRAM_AFTER_EVICTION, R.WAITING_FOR_LEASES)
    assert decision.evictions == ()
    assert decision.headroom_after_bytes is None


def test_a_full_global_queue_turns_queue_into_reject() -> None:
    fleet = (gpu(total_gib=24, residents=(resident("busy", 14, active_leases=1),)),)
    decision = plan_placement(fleet, model(), ask(queue_depth=POLICY.global_queue_limit), POLICY, NOW)

    assert decision.verdict is Verdict.REJECT_QUEUE_FULL
    assert decision.reason_codes[0] is R.QUEUE_FULL
    assert decision.accelerator_id is None


def test_a_request_already_in_the_queue_keeps_its_place_when_the_queue_is_full() -> None:
    fleet = (gpu(total_gib=24, residents=(resident("busy", 14, active_leases=1),)),)
    full = POLICY.global_queue_limit
    decision = plan_placement(fleet, model(), ask(queue_depth=full, queued=True), POLICY, NOW)

    assert decision.verdict is Verdict.QUEUE


def test_a_deadline_shorter_than_the_cold_load_is_rejected() -> None:
    decision = plan_placement((gpu(),), model(cold_load_ms=2000.0), ask(deadline_ms=1500.0), POLICY, NOW)
    assert (decision.verdict, decision.reason_codes) == (Verdict.REJECT_DEADLINE, (R.DEADLINE_EXCEEDED,))


def test_a_model_larger_than_any_accelerator_is_rejected_and_never_queued() -> None:
    fleet = (gpu(total_gib=24, residents=(resident("busy", 4, active_leases=1),)),)
    decision = plan_placement(fleet, model(required_gib=30, peak_gib=28), ask(), POLICY, NOW)

    assert decision.verdict is Verdict.REJECT_INSUFFICIENT_CAPACITY
    assert R.EXCEEDS_ACCELERATOR_CAPACITY in decision.reason_codes


def test_eviction_waits_out_the_cooldown() -> None:
    fleet = (gpu(total_gib=24, residents=(resident("idle", 16),), last_eviction_at=NOW - 10.0),)
    decision = plan_placement(fleet, model(), ask(), POLICY, NOW)

    assert decision.verdict is Verdict.QUEUE
    assert decision.reason_codes == (R.EVICTION_COOLDOWN,)


def test_a_model_that_just_finished_loading_is_not_evicted_until_a_cooldown_has_passed() -> None:
    just_loaded = gpu(total_gib=24, residents=(resident("fresh", 16),), last_load_at=NOW - 10.0)
    decision = plan_placement((just_loaded,), model(), ask(), POLICY, NOW)

    assert decision.verdict is Verdict.QUEUE
    assert decision.reason_codes == (R.EVICTION_COOLDOWN,)
    settled = msgspec.structs.replace(just_loaded, last_load_at=NOW - POLICY.eviction_cooldown_seconds)
    assert plan_placement((settled,), model(), ask(), POLICY, NOW).evictions == ("fresh",)


def test_a_deadline_inside_the_cooldown_is_rejected() -> None:
    # 20 s of cooldown left plus a 2 s load do not fit in 15 s.
    fleet = (gpu(total_gib=24, residents=(resident("idle", 16),), last_eviction_at=NOW - 10.0),)
    decision = plan_placement(fleet, model(), ask(deadline_ms=15_000.0), POLICY, NOW)

    assert decision.verdict is Verdict.REJECT_DEADLINE
    assert decision.reason_codes == (R.DEADLINE_EXCEEDED, R.EVICTION_COOLDOWN)


def test_the_cooldown_does_not_block_a_placement_that_needs_no_eviction() -> None:
    fleet = (gpu(last_eviction_at=NOW - 1.0),)
    assert plan_placement(fleet, model(), ask(), POLICY, NOW).verdict is Verdict.ADMIT


def test_critical_pressure_keeps_cold_loads_away_until_it_has_stably_fallen() -> None:
    recovering = PressureReading(
        level=Pressure.CRITICAL, since=NOW - 60.0, below_since=NOW - 5.0, below_peak=Pressure.NORMAL
    )
    fleet = (gpu("gpu-a", pressure=recovering), gpu("gpu-b", total_gib=24, residents=(resident("x", 8),)))
    decision = plan_placement(fleet, model(), ask(), POLICY, NOW)
    assert decision.accelerator_id == "gpu-b"

    alone = plan_placement(fleet[:1], model(), ask(deadline_ms=20_000.0), POLICY, NOW)
    assert alone.verdict is Verdict.REJECT_INSUFFICIENT_CAPACITY  # 25 s of recovery left: too long
    assert alone.reason_codes[0] is R.PRESSURE_CRITICAL  # the client's error code

    later = NOW + POLICY.pressure_stable_seconds
    refreshed = (msgspec.structs.replace(fleet[0], observed_at=later - 1.0),)
    assert plan_placement(refreshed, model(), ask(), POLICY, later).verdict is Verdict.ADMIT


def test_unknown_attribution_holds_back_cold_loads_by_default() -> None:
    decision = plan_placement((gpu(fresh=False),), model(), ask(), POLICY, NOW)
    assert (decision.verdict, decision.reason_codes) == (Verdict.QUEUE, (R.ATTRIBUTION_UNKNOWN,))


def test_unknown_attribution_is_reported_when_policy_allows_the_load() -> None:
    lenient = msgspec.structs.replace(POLICY, cold_load_requires_known_attribution=False)
    decision = plan_placement((gpu(fresh=False),), model(), ask(), lenient, NOW)
    assert (decision.verdict, decision.reason_codes) == (Verdict.ADMIT, (R.COLD_LOAD, R.ATTRIBUTION_UNKNOWN))


def test_a_resident_model_still_serves_while_attribution_is_unknown() -> None:
    fleet = (gpu(residents=(resident("embed", 4),), fresh=False),)
    assert plan_placement(fleet, model("embed"), ask(), POLICY, NOW).verdict is Verdict.ADMIT


def unsafe_with(partner: str) -> tuple[CoResidencyPair, ...]:
    return (CoResidencyPair(left=partner, right="new-model", status=CoResidencyStatus.PROVEN_UNSAFE),)


def test_an_idle_proven_unsafe_partner_is_evicted_even_when_there_is_room() -> None:
    fleet = (
        gpu(
            residents=(resident("rival", 4), resident("friend", 4)),
        ),
    )
    decision = plan_placement(fleet, model(), ask(), POLICY, NOW, unsafe_with("rival"))

    assert decision.verdict is Verdict.ADMIT_AFTER_EVICTION
    assert decision.evictions == ("rival",)
    assert decision.reason_codes == (R.COLD_LOAD, R.EVICTION_REQUIRED, R.CO_RESIDENCY_EVICTION)


def test_a_busy_proven_unsafe_partner_sends_the_model_elsewhere() -> None:
    fleet = (
        gpu("gpu-a", residents=(resident("rival", 4, active_leases=1),)),
        gpu("gpu-b", residents=(resident("x", 40),)),
    )
    decision = plan_placement(fleet, model(), ask(), POLICY, NOW, unsafe_with("rival"))
    assert (decision.verdict, decision.accelerator_id) == (Verdict.ADMIT, "gpu-b")

    alone = plan_placement(fleet[:1], model(), ask(), POLICY, NOW, unsafe_with("rival"))
    assert alone.verdict is Verdict.REJECT_INSUFFICIENT_CAPACITY
    assert R.CO_RESIDENCY_UNSAFE in alone.reason_codes


def test_safe_and_expected_pairs_do_not_restrict_placement() -> None:
    fleet = (gpu(residents=(resident("peer", 4),)),)
    for status in (
        CoResidencyStatus.PROVEN_SAFE,
        CoResidencyStatus.EXPECTED_SAFE,
        CoResidencyStatus.NOT_SAFE,
    ):
        pairs = (CoResidencyPair(left="new-model", right="peer", status=status),)
        assert plan_placement(fleet, model(), ask(), POLICY, NOW, pairs).verdict is Verdict.ADMIT


def test_a_loading_model_makes_its_requests_queue_behind_the_load() -> None:
    fleet = (gpu(residents=(resident("embed", 4, state=ResidencyState.LOADING),)), gpu("gpu-1"))
    decision = plan_placement(fleet, model("embed"), ask(), POLICY, NOW)
    assert (decision.verdict, decision.reason_codes) == (Verdict.QUEUE, (R.RESIDENCY_LOADING,))
    assert decision.accelerator_id == "gpu-0"


def test_a_model_still_being_unloaded_makes_its_requests_wait_instead_of_loading_it_beside() -> None:
    fleet = (gpu(residents=(resident("embed", 4, state=ResidencyState.UNLOADING),)), gpu("gpu-1"))
    decision = plan_placement(fleet, model("embed"), ask(), POLICY, NOW)
    assert (decision.verdict, decision.reason_codes) == (Verdict.QUEUE, (R.RESIDENCY_UNLOADING,))
    assert decision.accelerator_id == "gpu-0"


def test_a_busy_resident_model_queues_instead_of_loading_a_second_replica() -> None:
    # 16 GiB card: 1 GiB reserve, 14.96 GiB resident + leased: the 64 MiB floor does not fit right now.
    fleet = (
        gpu(
            "gpu-0",
            total_gib=16,
            residents=(resident("embed", 12, active_leases=1),),
            leases=(lease("l", "embed", 2.96),),
        ),
        gpu("gpu-1"),
    )
    decision = plan_placement(fleet, model("embed"), ask(), POLICY, NOW)
    assert (decision.verdict, decision.accelerator_id) == (Verdict.QUEUE, "gpu-0")


def test_a_stale_envelope_is_rejected_before_anything_else() -> None:
    decision = plan_placement((gpu(),), model(stale=True), ask(), POLICY, NOW)
    assert (decision.verdict, decision.reason_codes) == (
        Verdict.REJECT_STATE_STALE,
        (R.SCHEDULER_STATE_STALE,),
    )


def test_an_unhealthy_runtime_is_rejected() -> None:
    decision = plan_placement((gpu(),), model(), ask(runtime_healthy=False), POLICY, NOW)
    assert decision.verdict is Verdict.REJECT_NO_ELIGIBLE_ACCELERATOR
    assert decision.reason_codes == (R.RUNTIME_UNHEALTHY,)


def test_unavailable_or_disallowed_accelerators_are_not_eligible() -> None:
    fleet = (gpu("gpu-0", available=False), gpu("gpu-1"))
    decision = plan_placement(fleet, model(), ask(accelerator_ids=("gpu-0",)), POLICY, NOW)
    assert (decision.verdict, decision.reason_codes) == (
        Verdict.REJECT_NO_ELIGIBLE_ACCELERATOR,
        (R.NO_ELIGIBLE_NODE,),
    )
    assert plan_placement(fleet, model(), ask(), POLICY, NOW).accelerator_id == "gpu-1"


def test_every_decision_carries_the_budget_before_and_a_fingerprint() -> None:
    fleet = (gpu(residents=(resident("x", 8),)),)
    decision = plan_placement(fleet, model(), ask(), POLICY, NOW)

    assert decision.budget == account(fleet[0], POLICY, NOW)
    assert len(decision.fingerprint) == 64
    assert int(decision.fingerprint, 16) >= 0


def test_an_outgrown_envelope_refuses_cold_loads_as_stale() -> None:
    decision = plan_placement([gpu()], model(outgrown=True), ask(), POLICY, NOW)
    assert decision.verdict is Verdict.REJECT_STATE_STALE
    assert decision.reason_codes == (ReasonCode.SCHEDULER_STATE_STALE,)


def test_a_loaded_copy_of_an_outgrown_envelope_serves_on() -> None:
    state = gpu(residents=(resident("new-model", 12),))
    decision = plan_placement([state], model(outgrown=True), ask(), POLICY, NOW)
    assert decision.verdict is Verdict.ADMIT
    assert not decision.cold_load


def test_a_cold_load_avoids_the_accelerator_where_its_load_just_failed() -> None:
    decision = plan_placement(
        [gpu("gpu-0"), gpu("gpu-1", total_gib=40)], model(), ask(load_failed_on=("gpu-1",)), POLICY, NOW
    )
    assert decision.verdict is Verdict.ADMIT
    assert decision.accelerator_id == "gpu-0"  # gpu-1, the better fit, is where it just failed


def test_a_cold_load_that_just_failed_everywhere_it_fits_is_refused_naming_that() -> None:
    decision = plan_placement([gpu("gpu-0")], model(), ask(load_failed_on=("gpu-0",)), POLICY, NOW)
    assert decision.verdict is Verdict.REJECT_INSUFFICIENT_CAPACITY
    assert decision.reason_codes[0] is ReasonCode.RESIDENCY_LOAD_FAILED


def test_a_failed_load_elsewhere_does_not_keep_a_loaded_copy_from_serving() -> None:
    state = gpu("gpu-0", residents=(resident("new-model", 12),))
    decision = plan_placement([state], model(), ask(load_failed_on=("gpu-0",)), POLICY, NOW)
    assert decision.verdict is Verdict.ADMIT


def test_memory_outside_the_books_in_a_sample_older_than_the_last_load_is_waited_out_not_refused() -> None:
    # Sampled at NOW - 1 s, during the load that ended at NOW - 0.5 s: its 12 GiB may be the load's.
    fleet = (
        gpu(
            total_gib=24,
            residents=(resident("warm", 8, always_warm=True),),
            external_gib=12,
            last_load_at=NOW - 0.5,
        ),
    )
    decision = plan_placement(fleet, model(), ask(deadline_ms=30_000.0), POLICY, NOW)

    assert decision.verdict is Verdict.QUEUE
    assert decision.reason_codes == (R.INSUFFICIENT_VRAM_AFTER_EVICTION, R.WAITING_FOR_LEASES)


def test_memory_outside_the_books_in_a_sample_taken_after_the_last_load_is_refused_on() -> None:
    fleet = (
        gpu(
            total_gib=24,
            residents=(resident("warm", 8, always_warm=True),),
            external_gib=12,
            last_load_at=NOW - 2.0,
        ),
    )
    decision = plan_placement(fleet, model(), ask(deadline_ms=30_000.0), POLICY, NOW)

    assert decision.verdict is Verdict.REJECT_INSUFFICIENT_CAPACITY
    assert decision.reason_codes == (R.INSUFFICIENT_SCHEDULABLE_VRAM, R.INSUFFICIENT_VRAM_AFTER_EVICTION)
