"""What a queued request's place in line keeps of its decision: the accelerator whose leases it
waits on, which later requests yield to once it has waited a fairness window."""

from __future__ import annotations

from sched_builders import NOW, POLICY, ask, gpu, lease, model, resident

from gateway.scheduler import ResidencyState, Verdict, plan_placement
from gateway.serving.line import Place, note_blocked


def test_a_waiter_is_blocked_on_an_accelerator_only_while_it_waits_for_leases_there_to_end() -> None:
    place = Place("b")
    busy = [gpu(residents=(resident("a", 70, active_leases=1),), leases=(lease("l1", "a", 1),))]
    waiting = plan_placement(busy, model("b", required_gib=30, peak_gib=20), ask(), POLICY, NOW)
    assert waiting.verdict is Verdict.QUEUE
    note_blocked(place, waiting, 100.0, busy)
    note_blocked(place, waiting, 105.0, busy)
    assert (place.blocked_on, place.since) == ("gpu-0", 100.0)  # since it first waited there
    own_load = [gpu(residents=(resident("b", 10, state=ResidencyState.LOADING),))]
    loading = plan_placement(own_load, model("b"), ask(), POLICY, NOW)
    note_blocked(place, loading, 106.0, own_load)
    assert place.blocked_on is None  # waiting for its own load: nobody's turn to give


def test_a_waiters_turn_starts_once_the_model_in_its_way_has_loaded_not_while_it_loads() -> None:
    place = Place("b")
    # A load under way: its model is booked as a reservation (a lease) until it reports loaded.
    during = [
        gpu(residents=(resident("a", 0, state=ResidencyState.LOADING),), leases=(lease("load", "a", 70),))
    ]
    waiting = plan_placement(during, model("b", required_gib=30, peak_gib=20), ask(), POLICY, NOW)
    assert waiting.verdict is Verdict.QUEUE
    note_blocked(place, waiting, 100.0, during)
    assert place.blocked_on is None  # the load's lease: ending it is no one's turn to give
    after = [gpu(residents=(resident("a", 70, active_leases=1),), leases=(lease("l1", "a", 1),))]
    waiting = plan_placement(after, model("b", required_gib=30, peak_gib=20), ask(), POLICY, NOW)
    note_blocked(place, waiting, 112.0, after)
    assert (place.blocked_on, place.since) == ("gpu-0", 112.0)  # a model just loaded gets its window
