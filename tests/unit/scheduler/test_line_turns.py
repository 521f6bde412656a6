"""What a queued request's place in line keeps of its decision: the accelerator whose leases it
waits on, which later requests yield to once it has waited a fairness window."""

from __future__ import annotations

from sched_builders import NOW, POLICY, ask, gpu, lease, model, resident

from gateway.scheduler import ResidencyState, Verdict, plan_placement
from gateway.serving.line import Place, note_blocked


def test_a_waiter_is_blocked_on_an_accelerator_only_while_it_waits_for_leases_there_to_end() -> None:
    place = Place("b")
    waiting = plan_placement(
        [gpu(residents=(resident("a", 70, active_leases=1),), leases=(lease("l1", "a", 1),))],
        model("b", required_gib=30, peak_gib=20),
        ask(),
        POLICY,
        NOW,
    )
    assert waiting.verdict is Verdict.QUEUE
    note_blocked(place, waiting, 100.0)
    note_blocked(place, waiting, 105.0)
    assert (place.blocked_on, place.since) == ("gpu-0", 100.0)  # since it first waited there
    loading = plan_placement(
        [gpu(residents=(resident("b", 10, state=ResidencyState.LOADING),))], model("b"), ask(), POLICY, NOW
    )
    note_blocked(place, loading, 106.0)
    assert place.blocked_on is None  # waiting for its own load: nobody's turn to give
