"""`modelforge status` judges the embedded stack: every process `up` started must be alive, the
gateway ready and the projection not halted; one line per component, any failure fails it."""

from __future__ import annotations

from typing import Any

from modelforge.devstack.health import Check, Observed, Process, judge, render

UP = [Process("nats", 10, True), Process("projector", 11, True), Process("gateway", 12, True)]


def projection(halted: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "streams": [{"stream": "MF_EVENTS", "lag": 3}],
        "halted": halted or [],
        "gaps": [],
        "gaps_total": 0,
    }


def test_a_running_stack_with_a_ready_gateway_and_a_projection_that_runs_is_all_ok() -> None:
    checks = judge(Observed(processes=UP, ready=True, ready_detail="200", projection=projection()))
    assert all(c.ok for c in checks)
    assert [c.component for c in checks] == ["nats", "projector", "gateway", "readyz", "projection"]
    assert checks[-1].detail == "MF_EVENTS lag 3"


def test_a_process_whose_pid_is_gone_is_down() -> None:
    processes = [*UP[:1], Process("projector", 11, False), UP[2]]
    checks = judge(Observed(processes=processes, ready=True, projection=projection()))
    assert Check("projector", False, "down (pid 11 is gone)") in checks


def test_a_halted_projection_is_down_and_says_where() -> None:
    halt = {"stream": "MF_EVENTS", "seq": 42, "event_type": "Weird", "reason": "cannot apply"}
    checks = judge(Observed(processes=UP, ready=True, projection=projection([halt])))
    assert checks[-1] == Check("projection", False, "halted: MF_EVENTS at 42 (Weird): cannot apply")


def test_a_gateway_not_ready_or_not_running_is_down_and_the_projection_unknown() -> None:
    not_ready = judge(Observed(processes=UP, ready=False, ready_detail="503", projection=projection()))
    assert not next(c for c in not_ready if c.component == "readyz").ok
    stopped = [*UP[:2], Process("gateway", 12, False)]
    checks = judge(Observed(processes=stopped))
    assert [c.ok for c in checks[-2:]] == [False, False]


def test_nothing_started_is_one_failing_line() -> None:
    checks = judge(Observed(processes=[]))
    assert len(checks) == 1
    assert not checks[0].ok
    assert render(checks).startswith("stack       DOWN")
