"""Accounting arithmetic, worked by hand.  Default policy: reserve = max(1 GiB, 5 % of total)."""

from __future__ import annotations

from sched_builders import NOW, POLICY, gib, gpu, lease, model, resident

from gateway.scheduler import AcceleratorState, Attribution, account, required_bytes, safety_reserve


def test_fresh_telemetry_splits_observed_into_attributed_and_external() -> None:
    # 80 GiB card; residents 20 + 5 GiB; one lease reserving 4 GiB of which 1 GiB is in use;
    # the hardware reports 30 GiB used.
    state = AcceleratorState(
        accelerator_id="gpu-0",
        node_id="node-a",
        total_bytes=gib(80),
        observed_used_bytes=gib(30),
        observed_at=NOW - 2.0,
        residents=(resident("embed", 20), resident("rerank", 5)),
        leases=(lease("l1", "embed", reserved_gib=4, materialised_gib=1),),
    )
    budget = account(state, POLICY, NOW)

    assert budget.attribution is Attribution.KNOWN
    assert budget.resident_bytes == gib(25)
    assert budget.materialised_bytes == gib(1)
    assert budget.leased_bytes == gib(3)  # reserved 4 - materialised 1
    assert budget.attributed_bytes == gib(26)  # 25 resident + 1 materialised
    assert budget.external_bytes == gib(4)  # 30 observed - 26 attributed
    assert budget.safety_reserve_bytes == gib(4)  # max(1 GiB, 5 % of 80 GiB)
    assert budget.committed_bytes == gib(33)  # max(30, 26) + 3 outstanding
    assert budget.schedulable_bytes == gib(43)  # 80 - 4 - 33
    assert budget.invariant_delta_bytes == gib(4)
    assert budget.utilisation == 33 / 80


def test_stale_telemetry_is_unknown_and_trusts_the_larger_of_observed_and_accounted() -> None:
    # Telemetry an hour old says 20 GiB, but we know we placed 26 GiB: believe 26.
    state = AcceleratorState(
        accelerator_id="gpu-0",
        node_id="node-a",
        total_bytes=gib(80),
        observed_used_bytes=gib(20),
        observed_at=NOW - 3600.0,
        residents=(resident("embed", 20), resident("rerank", 5)),
        leases=(lease("l1", "embed", reserved_gib=4, materialised_gib=1),),
    )
    budget = account(state, POLICY, NOW)

    assert budget.attribution is Attribution.UNKNOWN
    assert budget.external_bytes == 0
    assert budget.committed_bytes == gib(29)  # max(20, 26) + 3
    assert budget.schedulable_bytes == gib(47)  # 80 - 4 - 29
    assert budget.invariant_delta_bytes == -gib(6)


def test_stale_telemetry_that_shows_more_than_we_placed_still_counts_it() -> None:
    state = gpu(residents=(resident("embed", 10),), external_gib=12, fresh=False)
    budget = account(state, POLICY, NOW)

    assert budget.attribution is Attribution.UNKNOWN
    assert budget.committed_bytes == gib(22)
    assert budget.schedulable_bytes == gib(80 - 4 - 22)


def test_without_any_telemetry_attribution_is_unknown_and_books_are_used() -> None:
    state = AcceleratorState(
        accelerator_id="gpu-0", node_id="n", total_bytes=gib(24), residents=(resident("embed", 6),)
    )
    budget = account(state, POLICY, NOW)

    assert budget.attribution is Attribution.UNKNOWN
    assert budget.observed_used_bytes is None
    assert budget.committed_bytes == gib(6)
    assert budget.schedulable_bytes == gib(24) - gib(1.2) - gib(6)  # reserve 5 % of 24 GiB = 1.2 GiB


def test_telemetry_exactly_at_the_freshness_limit_is_still_fresh() -> None:
    state = gpu()
    at_limit = AcceleratorState(
        accelerator_id=state.accelerator_id,
        node_id=state.node_id,
        total_bytes=state.total_bytes,
        observed_used_bytes=0,
        observed_at=NOW - POLICY.telemetry_fresh_seconds,
    )
    assert account(at_limit, POLICY, NOW).attribution is Attribution.KNOWN
    assert account(at_limit, POLICY, NOW + 0.001).attribution is Attribution.UNKNOWN


def test_small_cards_keep_the_minimum_reserve() -> None:
    assert safety_reserve(gib(16), POLICY) == gib(1)  # 5 % would be 0.8 GiB
    assert safety_reserve(gib(80), POLICY) == gib(4)


def test_materialised_bytes_never_exceed_the_reservation() -> None:
    state = gpu(leases=(lease("l1", "embed", reserved_gib=2, materialised_gib=3),))
    budget = account(state, POLICY, NOW)

    assert budget.materialised_bytes == gib(2)
    assert budget.leased_bytes == 0


def test_overcommitted_accelerator_has_negative_schedulable_bytes() -> None:
    state = gpu(total_gib=16, residents=(resident("big", 14),), external_gib=2)
    budget = account(state, POLICY, NOW)

    assert budget.schedulable_bytes == gib(16 - 1 - 16)


def test_cold_load_needs_the_larger_of_measured_required_and_peak_plus_margin() -> None:
    # margin = runtime 256 MiB + max(512 MiB, 10 % of peak)
    small_peak = model(required_gib=6, peak_gib=5)  # 5 GiB + 256 + 512 MiB = 5.75 GiB < 6 GiB
    large_peak = model(required_gib=8, peak_gib=10)  # 10 GiB + 256 MiB + 1 GiB = 11.25 GiB

    assert required_bytes(small_peak, False, POLICY) == gib(6)
    assert required_bytes(large_peak, False, POLICY) == gib(11.25)


def test_resident_model_needs_only_the_per_request_floor() -> None:
    plain = model(required_gib=20, peak_gib=18)
    hungry = model(required_gib=20, peak_gib=18, request_floor_bytes=gib(2))

    assert required_bytes(plain, True, POLICY) == POLICY.request_execution_floor_bytes  # the policy floor
    assert required_bytes(hungry, True, POLICY) == gib(2)  # the envelope's own, larger floor


def test_a_worker_grown_past_its_load_measurement_counts_as_the_residents_while_telemetry_is_fresh() -> None:
    # Loaded at 4 GiB, its worker holds 6 GiB now; the card shows 10 GiB used.
    grown = (resident("embed", 4, worker_bytes=gib(6)),)
    fresh = account(gpu(residents=grown, external_gib=6), POLICY, NOW)
    assert (fresh.resident_bytes, fresh.external_bytes) == (gib(6), gib(4))
    stale = account(gpu(residents=grown, external_gib=6, fresh=False), POLICY, NOW)
    assert stale.resident_bytes == gib(4)  # an old figure does not move the books


def test_a_worker_holding_less_than_its_load_measured_does_not_shrink_the_books() -> None:
    shrunk = (resident("embed", 4, worker_bytes=gib(3)),)
    assert account(gpu(residents=shrunk), POLICY, NOW).resident_bytes == gib(4)
