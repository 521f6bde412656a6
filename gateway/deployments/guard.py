"""Rollback guards, judged: does an experiment taking a share of its capability's traffic do worse
than the stable deployment over the guard's window? Pure: the outcomes come from the caller
(`gateway.serving.outcomes`), the clock too.

A guard compares like with like: the experiment's figure and the stable deployment's, each over
the outcomes since `since` (when this split began) inside the window. Rates and latencies judge
only once both sides have `min_requests` outcomes; an INVALID_OUTPUT count judges at once (a model
answering outside its contract is wrong on the first answer)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import msgspec

from streams.codes import ServingError
from streams.events.releases import GuardKind, GuardTrip, RollbackGuard, RollbackPolicy

MAX_GUARDS = 8


class Outcome(msgspec.Struct, frozen=True):
    """How one request served by a deployment ended: its code ("OK" when served), whether it failed
    on the serving side (a 5xx: the client's own mistakes say nothing of the model), its latency."""

    at: float
    code: str = "OK"
    server_failed: bool = False
    latency_ms: float = 0.0


def figure(kind: GuardKind, outcomes: Sequence[Outcome]) -> float:
    match kind:
        case "error_rate":
            return sum(o.server_failed for o in outcomes) / len(outcomes) if outcomes else 0.0
        case "p95_latency_ms":
            return p95([o.latency_ms for o in outcomes if o.code == "OK"])
        case "invalid_output_count":
            return float(sum(o.code == "INVALID_OUTPUT" for o in outcomes))


def p95(values: Sequence[float]) -> float:
    """The nearest-rank 95th percentile (0 with no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def judge(
    policy: RollbackPolicy,
    experiment_id: str,
    experiment: Sequence[Outcome],
    stable: Sequence[Outcome],
    now: float,
    since: float,
) -> GuardTrip | None:
    """The first guard of the policy that trips, with its measurement, or None."""
    for guard in policy.guards:
        start = max(since, now - guard.window_s)
        ours = [o for o in experiment if o.at >= start]
        theirs = [o for o in stable if o.at >= start]
        if guard.kind != "invalid_output_count" and min(len(ours), len(theirs)) < guard.min_requests:
            continue
        observed, baseline = figure(guard.kind, ours), figure(guard.kind, theirs)
        if observed - baseline > guard.threshold:
            return GuardTrip(
                experiment_id=experiment_id,
                guard=guard,
                observed=observed,
                baseline=baseline,
                experiment_requests=len(ours),
                stable_requests=len(theirs),
            )
    return None


def check_policy(policy: RollbackPolicy) -> RollbackPolicy:
    """The policy as it may be recorded, else ROLLBACK_POLICY_INVALID naming the guard."""
    if len(policy.guards) > MAX_GUARDS:
        raise ServingError("ROLLBACK_POLICY_INVALID", f"at most {MAX_GUARDS} guards", "guards")
    for index, guard in enumerate(policy.guards):
        problem = _problem(guard)
        if problem:
            raise ServingError(
                "ROLLBACK_POLICY_INVALID", f"guard {index} ({guard.kind}): {problem}", "guards"
            )
    return policy


def _problem(guard: RollbackGuard) -> str:
    if not math.isfinite(guard.threshold) or guard.threshold < 0:
        return "the threshold must be a finite number ≥ 0"
    if guard.kind == "error_rate" and guard.threshold >= 1:
        return "an error-rate threshold is a fraction below 1 (0.05: five points above the stable's)"
    if not math.isfinite(guard.window_s) or guard.window_s <= 0:
        return "the window must be a positive number of seconds"
    if guard.min_requests < 1:
        return "min_requests must be at least 1"
    return ""
