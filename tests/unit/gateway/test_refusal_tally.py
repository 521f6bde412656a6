"""Identical placement refusals within a window are one event with their count
(gateway.serving.refusals), driven by a fake clock."""

from __future__ import annotations

from gateway.serving.refusals import WINDOW_S, RefusalTally
from streams.events import serving as s
from tests.support.events import dry_run_admitting


def refusal(
    deployment_id: str = "dep-a",
    verdict: str = "REJECT_INSUFFICIENT_CAPACITY",
    reasons: tuple[str, ...] = ("INSUFFICIENT_SCHEDULABLE_VRAM",),
    request_id: str = "req-0",
    dry_run: bool = False,
) -> s.PlacementRejected:
    return s.PlacementRejected(
        accelerator_id="acc-0",
        request_id=request_id,
        deployment_id=deployment_id,
        verdict=verdict,
        reason_codes=reasons,
        decision_fingerprint=f"fp-{request_id}",
        dry_run=dry_run,
    )


def test_a_storm_of_a_thousand_refusals_in_a_second_is_a_few_events_whose_counts_add_up() -> None:
    tally, written = RefusalTally(), []
    for n in range(1_000):  # 1,000 refusals over 1.2 s: more than one window
        written += tally.add(refusal(request_id=f"req-{n}"), now=n * 0.0012)
    written += tally.drain()
    assert len(written) <= 2
    assert sum(event.count for event in written) == 1_000
    assert written[0].request_id == "req-0"  # each event names its window's first refusal
    assert all(event.window_s == WINDOW_S for event in written)


def test_a_window_is_written_once_it_has_closed_and_not_before() -> None:
    tally = RefusalTally(window_s=1.0)
    tally.add(refusal(), now=10.0)
    tally.add(refusal(request_id="req-1"), now=10.5)
    assert tally.due(10.99) == []
    assert tally.next_close() == 11.0
    [event] = tally.due(11.0)
    assert (event.count, event.request_id) == (2, "req-0")
    assert tally.next_close() is None


def test_a_refusal_after_its_window_closed_opens_a_new_one_and_hands_back_the_closed() -> None:
    tally = RefusalTally(window_s=1.0)
    tally.add(refusal(), now=0.0)
    closed = tally.add(refusal(request_id="req-late"), now=1.5)  # its timer had not fired yet
    assert [(e.count, e.request_id) for e in closed] == [(1, "req-0")]
    assert [(e.count, e.request_id) for e in tally.drain()] == [(1, "req-late")]


def test_refusals_that_differ_in_deployment_verdict_first_reason_or_dry_run_are_counted_apart() -> None:
    tally = RefusalTally()
    kinds = [
        refusal(),
        refusal(deployment_id="dep-b"),
        refusal(verdict="QUEUE", reasons=("INSUFFICIENT_SCHEDULABLE_VRAM",)),
        refusal(reasons=("NO_ELIGIBLE_NODE",)),
        refusal(dry_run=True),
    ]
    for kind in kinds * 3:
        tally.add(kind, now=0.0)
    assert sorted(e.count for e in tally.drain()) == [3] * len(kinds)


def test_later_reasons_do_not_split_a_window() -> None:
    tally = RefusalTally()
    tally.add(refusal(reasons=("INSUFFICIENT_SCHEDULABLE_VRAM", "PRESSURE_HIGH")), now=0.0)
    tally.add(refusal(reasons=("INSUFFICIENT_SCHEDULABLE_VRAM",)), now=0.1)
    assert [e.count for e in tally.drain()] == [2]


def test_dry_runs_that_would_admit_are_counted_in_windows_of_their_own() -> None:
    planned = dry_run_admitting()
    tally = RefusalTally()
    for n in range(50):
        tally.add(planned, now=n * 0.01)
        tally.add(refusal(request_id=f"req-{n}", dry_run=True), now=n * 0.01)
    written = tally.drain()
    assert sorted((type(e).__name__, e.count) for e in written) == [
        ("PlacementDryRun", 50),
        ("PlacementRejected", 50),
    ]
