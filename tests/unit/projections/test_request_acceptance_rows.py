"""A request's row is the same whether its acceptance was recorded as a `RequestAccepted` of its
own or carried by its end event (a request that ended while its gateway held the acceptance)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from projections.handlers import ops_for
from streams.events import requests as r
from tests.unit.projections.test_handlers import simulate

ACCEPTED_AT = datetime(2026, 12, 5, 23, 50, 0, 123456, tzinfo=UTC)
FINISHED_AT = "2026-12-05T23:50:00.131000+00:00"
IDENTITY: dict[str, Any] = {
    "request_id": "r1",
    "client_id": "c1",
    "capability": "rag.embedding@1",
    "trace_id": "t" * 32,
}


def _acceptance(gateway_id: str) -> r.Acceptance:
    return r.Acceptance(
        input_sha256="a" * 64,
        shape_bucket="items:1-4/chars:0-512",
        items=2,
        input_type="query",
        gateway_id=gateway_id,
        accepted_at=ACCEPTED_AT,
    )


def _ends(accepted: r.Acceptance | None) -> list[r.RequestCompleted | r.RequestFailed]:
    latency = r.LatencyBreakdown(validation_ms=0.1, dispatch_ms=5.0, total_ms=8.0)
    return [
        r.RequestCompleted(
            **IDENTITY,
            deployment_id="d1",
            node_id="n1",
            accelerator_id="n1-cpu0",
            cold=False,
            latency=latency,
            usage=r.Usage(items=2, input_tokens=9),
            standby_lease_id="standby-1",
            accepted=accepted,
        ),
        r.RequestFailed(
            **IDENTITY,
            code="WORKER_FAILED",
            http_status=502,
            deployment_id="d1",
            latency=latency,
            accepted=accepted,
        ),
    ]


@given(end=st.integers(0, 1), gateway_id=st.sampled_from(["", "gw-1"]))
def test_an_end_event_carrying_its_acceptance_makes_the_row_two_events_make(
    end: int, gateway_id: str
) -> None:
    acceptance = _acceptance(gateway_id)
    in_two = ops_for(acceptance.alone(**IDENTITY), 1, acceptance.accepted_at.isoformat()) + ops_for(
        _ends(None)[end], 2, FINISHED_AT
    )
    in_one = ops_for(_ends(acceptance)[end], 1, FINISHED_AT)
    assert simulate(in_one) == simulate(in_two)


def test_a_row_from_one_event_has_the_acceptance_and_the_time_it_was_accepted() -> None:
    (row,) = simulate(ops_for(_ends(_acceptance("gw-1"))[0], 1, FINISHED_AT)).values()
    assert row["accepted_at"] == ACCEPTED_AT.isoformat()
    assert row["finished_at"] == FINISHED_AT
    assert row["accepted_by"] == "gw-1"
    assert row["input_sha256"] == "a" * 64
    assert row["status"] == "completed"
