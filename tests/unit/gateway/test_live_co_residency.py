"""The live view keeps what measurement proved about two deployments sharing an accelerator."""

from __future__ import annotations

from datetime import UTC, datetime

from eventstore.records import RecordedEvent
from gateway.scheduler import CoResidencyPair, CoResidencyStatus
from gateway.state.live import LiveState
from streams.envelope import SYSTEM, Envelope
from streams.events import serving as s


def proven(sequence: int, state: str) -> RecordedEvent:
    event = s.CoResidencyProven(
        accelerator_id="n1-gpu0",
        deployment_a="emb",
        deployment_b="rerank",
        generation=1,
        observed_bytes=1 << 30,
        state=state,  # type: ignore[arg-type]
    )
    envelope = Envelope(
        event_id=f"e{sequence}",
        event_type="CoResidencyProven",
        schema_version=1,
        aggregate_type="accelerator",
        aggregate_id="n1-gpu0",
        occurred_at=datetime(2026, 12, 1, tzinfo=UTC),
        actor=SYSTEM,
    )
    return RecordedEvent(sequence, "mf.evt.accelerator.n1-gpu0.CoResidencyProven", envelope, event)


def test_a_proven_pair_reaches_placement_and_the_latest_proof_of_a_pair_wins() -> None:
    live = LiveState()
    live.apply(proven(1, "PROVEN_UNSAFE"))
    assert live.co_residency == (
        CoResidencyPair(left="emb", right="rerank", status=CoResidencyStatus.PROVEN_UNSAFE),
    )
    live.apply(proven(2, "PROVEN_SAFE"))
    assert [p.status for p in live.co_residency] == [CoResidencyStatus.PROVEN_SAFE]


def test_an_older_proof_delivered_again_changes_nothing() -> None:
    live = LiveState()
    live.apply(proven(1, "PROVEN_UNSAFE"))
    live.apply(proven(2, "PROVEN_SAFE"))
    live.apply(proven(1, "PROVEN_UNSAFE"))
    assert [p.status for p in live.co_residency] == [CoResidencyStatus.PROVEN_SAFE]
