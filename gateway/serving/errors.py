"""Scheduler verdicts and reasons as client-facing errors (stable codes, honest statuses)."""

from __future__ import annotations

from gateway.scheduler import PlacementDecision, ReasonCode, Verdict
from streams import codes
from streams.codes import ServingError


def rejection(
    decision: PlacementDecision, deployment_id: str, stale_reason: str = "", deadline_ms: float | None = None
) -> ServingError:
    """The first reason that is a catalogue code names the error, as the reference does.
    `stale_reason`: why the deployment's measured envelope no longer holds, if it does not;
    `deadline_ms`: what was left of the request's deadline when it was decided."""
    details: dict[str, object] = {
        "verdict": decision.verdict.value,
        "reason_codes": [r.value for r in decision.reason_codes],
        "decision_fingerprint": decision.fingerprint,
        "deployment_id": deployment_id,
    }
    if decision.verdict is Verdict.REJECT_QUEUE_FULL:
        return ServingError("QUEUE_FULL", "the scheduler's queue is full; retry shortly", details=details)
    if decision.verdict is Verdict.REJECT_DEADLINE:
        return ServingError(
            "REQUEST_TIMEOUT", "the request's deadline is too short to serve it", details=details
        )
    if decision.verdict is Verdict.REJECT_STATE_STALE:
        details["stale_reason"] = stale_reason
        return ServingError(
            "SCHEDULER_STATE_STALE",
            f"the resource envelope measured for {deployment_id} no longer holds ({stale_reason}): "
            "probe the candidate on the node as it is now and promote that measurement",
            details=details,
        )
    if decision.reason_codes == (ReasonCode.ENVELOPE_CLASS_UNMEASURED,):
        return ServingError(
            "ENVELOPE_CLASS_UNMEASURED",
            f"no eligible accelerator is of the hardware class {deployment_id}'s envelope was measured "
            "on: probe the candidate on the accelerator model and runtime it should run on, and promote "
            "that measurement",
            details=details,
        )
    reasons = decision.reason_codes
    if reasons[:2] == (ReasonCode.PRESSURE_CRITICAL, ReasonCode.DEADLINE_EXCEEDED):
        return _pressure_outlasts_deadline(decision, deployment_id, deadline_ms, details)
    code = next((r.value for r in reasons if r.value in codes.ERROR_CODES), None)
    if decision.verdict is Verdict.REJECT_NO_ELIGIBLE_ACCELERATOR and code is None:
        code = ReasonCode.NO_ELIGIBLE_NODE.value
    return ServingError(
        code or "INSUFFICIENT_SCHEDULABLE_VRAM",
        f"cannot place {deployment_id}: {decision.verdict.value} ({', '.join(details['reason_codes'])})",  # type: ignore[arg-type]
        http_status=503,
        details=details,
    )


def _pressure_outlasts_deadline(
    decision: PlacementDecision, deployment_id: str, deadline_ms: float | None, details: dict[str, object]
) -> ServingError:
    """PRESSURE_CRITICAL for a request that could have waited for pressure to fall, but not that long."""
    budget = decision.budget
    where = budget.accelerator_id if budget is not None else "its accelerator"
    details["pressure_wait_ms"] = round(decision.wait_ms)
    left = "no queue wait that long (max_queue_wait_seconds)"
    if deadline_ms is not None:
        details["deadline_ms"] = round(deadline_ms)
        left = f"its deadline leaves {deadline_ms:.0f} ms"
    return ServingError(
        "PRESSURE_CRITICAL",
        f"cannot place {deployment_id} before the request's deadline: memory pressure on {where} is "
        f"CRITICAL and cold loads may resume there in {decision.wait_ms:.0f} ms at the earliest "
        f"(pressure_stable_seconds below critical), then the load itself; {left}",
        http_status=503,
        details=details,
    )
