"""Rollback guards, judged against the stable deployment over a window: a rate or a latency needs
enough outcomes on both sides; an INVALID_OUTPUT count trips past its threshold at once; outcomes
before the split began, or outside the window, do not count. A replica's judge finds trips only
for experiments holding a share under a rollback policy, on the fleet's outcomes since the split
began (the outcomes followed for each split under guard)."""

from __future__ import annotations

from collections import deque

from gateway.deployments.guard import Outcome, judge, p95
from gateway.operations.guarded_splits import GuardedSplit, guarded_splits, tripped_guards
from gateway.serving.outcomes import OutcomeLog
from gateway.state.catalog import Catalog
from streams.events import releases as r
from streams.events.requests import LatencyBreakdown, RequestCompleted, RequestFailed, Usage
from tests.support.events import catalog_of
from tests.unit.gateway.test_canary_split import ACTIVATED, CREATED, REGISTERED, STABLE, split

NOW = 10_000.0
OK = Outcome(NOW - 1)
FAILED = Outcome(NOW - 1, code="INTERNAL_ERROR", server_failed=True)
INVALID = Outcome(NOW - 1, code="INVALID_OUTPUT", server_failed=True)


def policy(kind: r.GuardKind, threshold: float, **options: float) -> r.RollbackPolicy:
    guard = r.RollbackGuard(kind=kind, threshold=threshold, **options)  # type: ignore[arg-type]
    return r.RollbackPolicy(guards=(guard,))


def test_an_error_rate_past_the_stables_by_the_threshold_trips() -> None:
    trip = judge(
        policy("error_rate", 0.1, min_requests=10), "exp", [FAILED] * 3 + [OK] * 7, [OK] * 10, NOW, 0
    )
    assert trip is not None
    assert (trip.observed, trip.baseline, trip.experiment_requests) == (0.3, 0.0, 10)


def test_an_error_rate_within_the_threshold_of_the_stables_does_not_trip() -> None:
    stable = [FAILED] * 2 + [OK] * 8
    assert (
        judge(policy("error_rate", 0.1, min_requests=10), "exp", [FAILED] * 3 + [OK] * 7, stable, NOW, 0)
        is None
    )


def test_a_rate_on_too_few_outcomes_does_not_judge() -> None:
    assert judge(policy("error_rate", 0.1, min_requests=20), "exp", [FAILED] * 19, [OK] * 50, NOW, 0) is None


def test_a_p95_latency_past_the_stables_by_the_threshold_trips() -> None:
    slow = [Outcome(NOW - 1, latency_ms=500.0)] * 20
    fast = [Outcome(NOW - 1, latency_ms=20.0)] * 20
    trip = judge(policy("p95_latency_ms", 100, min_requests=20), "exp", slow, fast, NOW, 0)
    assert trip is not None
    assert (trip.observed, trip.baseline) == (500.0, 20.0)


def test_invalid_outputs_past_the_threshold_trip_without_a_minimum() -> None:
    assert judge(policy("invalid_output_count", 2), "exp", [INVALID] * 2, [], NOW, 0) is None
    assert judge(policy("invalid_output_count", 2), "exp", [INVALID] * 3, [], NOW, 0) is not None


def test_outcomes_outside_the_window_or_before_the_split_do_not_count() -> None:
    old = [Outcome(NOW - 120, code="INVALID_OUTPUT")] * 5
    assert judge(policy("invalid_output_count", 2, window_s=60), "exp", old, [], NOW, 0) is None
    assert judge(policy("invalid_output_count", 2, window_s=600), "exp", old, [], NOW, since=NOW - 60) is None


def test_p95_is_the_nearest_rank() -> None:
    assert p95([float(v) for v in range(1, 101)]) == 95.0
    assert p95([]) == 0.0


def test_the_outcome_log_keeps_what_a_request_event_says_of_its_deployment() -> None:
    log = OutcomeLog()
    latency = LatencyBreakdown(total_ms=12.0)
    log.note(RequestCompleted(request_id="r1", client_id="c", capability="cap", deployment_id="exp",
                              node_id="n", accelerator_id="a", cold=False, latency=latency, usage=Usage(items=1)), at=1.0)  # fmt: skip
    log.note(RequestFailed(request_id="r2", client_id="c", capability="cap", code="INVALID_OUTPUT",
                           http_status=502, deployment_id="exp", latency=latency), at=2.0)  # fmt: skip
    assert log.of("exp") == [
        Outcome(1.0, latency_ms=12.0),
        Outcome(2.0, code="INVALID_OUTPUT", server_failed=True, latency_ms=12.0),
    ]
    assert log.changed.is_set()


def began(catalog: Catalog, at: float) -> dict[GuardedSplit, float]:
    return {split: at for split in guarded_splits(catalog).values()}


def test_only_an_experiment_with_a_share_and_a_policy_is_judged() -> None:
    guarded = r.RollbackPolicyChanged(deployment_id="exp", policy=policy("invalid_output_count", 0))
    log = OutcomeLog()
    log.by_deployment["exp"] = deque([INVALID])
    with_share = catalog_of(REGISTERED, STABLE, CREATED, ACTIVATED, guarded, split(10))
    assert [
        (stable, t.experiment_id)
        for stable, t in tripped_guards(with_share, log, NOW, began(with_share, NOW - 5))
    ] == [("emb", "exp")]
    without_share = catalog_of(REGISTERED, STABLE, CREATED, ACTIVATED, guarded, split(0))
    assert guarded_splits(without_share) == {}
    assert tripped_guards(without_share, log, NOW, began(with_share, NOW - 5)) == []
    unguarded = catalog_of(REGISTERED, STABLE, CREATED, ACTIVATED, split(10))
    assert guarded_splits(unguarded) == {}
    assert tripped_guards(unguarded, log, NOW, began(with_share, NOW - 5)) == []


def test_a_split_under_guard_is_followed_over_its_longest_window_and_its_deployments() -> None:
    guards = r.RollbackPolicy(
        guards=(
            r.RollbackGuard(kind="invalid_output_count", threshold=1, window_s=60),
            r.RollbackGuard(kind="error_rate", threshold=0.1, window_s=900),
        )
    )
    guarded = r.RollbackPolicyChanged(deployment_id="exp", policy=guards)
    catalog = catalog_of(REGISTERED, STABLE, CREATED, ACTIVATED, guarded, split(10))
    (followed,) = guarded_splits(catalog).values()
    assert (followed.stable_id, followed.guarded, followed.window_s) == ("emb", ("exp",), 900)
    assert followed.deployments == {"emb", "exp"}
    ramped = catalog_of(REGISTERED, STABLE, CREATED, ACTIVATED, guarded, split(10), split(25))
    assert guarded_splits(ramped)["emb"] != followed  # a changed split is followed anew


def test_a_split_is_judged_only_once_its_beginning_is_known_and_on_outcomes_since() -> None:
    guarded = r.RollbackPolicyChanged(deployment_id="exp", policy=policy("invalid_output_count", 0))
    log = OutcomeLog()
    log.by_deployment["exp"] = deque([INVALID])  # at NOW - 1
    catalog = catalog_of(REGISTERED, STABLE, CREATED, ACTIVATED, guarded, split(10))
    assert tripped_guards(catalog, log, NOW, {}) == []  # not followed yet
    assert tripped_guards(catalog, log, NOW, began(catalog, NOW - 0.5)) == []  # before the split began
    assert len(tripped_guards(catalog, log, NOW, began(catalog, NOW - 2))) == 1


def test_an_experiment_without_fresh_outcomes_of_its_own_is_not_judged_again() -> None:
    guarded = r.RollbackPolicyChanged(deployment_id="exp", policy=policy("invalid_output_count", 0))
    log = OutcomeLog()
    log.by_deployment["exp"] = deque([INVALID])
    catalog = catalog_of(REGISTERED, STABLE, CREATED, ACTIVATED, guarded, split(10))
    assert tripped_guards(catalog, log, NOW, began(catalog, NOW - 5), fresh={"emb"}) == []
    assert len(tripped_guards(catalog, log, NOW, began(catalog, NOW - 5), fresh={"exp"})) == 1


def test_the_outcome_log_keeps_only_the_deployments_asked_and_forgets_them() -> None:
    log = OutcomeLog()
    for deployment_id in ("exp", "other"):
        log.note(RequestFailed(request_id="r", client_id="c", capability="cap", code="INVALID_OUTPUT",
                               http_status=502, deployment_id=deployment_id), at=1.0, only={"exp"})  # fmt: skip
    assert (len(log.of("exp")), log.of("other")) == (1, [])
    log.forget({"exp"})
    assert (log.of("exp"), log.take_fresh()) == ([], set())


def test_taking_the_fresh_deployments_empties_them_and_clears_the_wakeup() -> None:
    log = OutcomeLog()
    log.note(RequestFailed(request_id="r", client_id="c", capability="cap", code="INVALID_OUTPUT",
                           http_status=502, deployment_id="exp"), at=1.0)  # fmt: skip
    assert log.take_fresh() == {"exp"}
    assert (log.take_fresh(), log.changed.is_set()) == (set(), False)
