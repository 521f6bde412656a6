"""The live view: what it keeps from events beyond each accelerator's own fold."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec

from eventstore.records import RecordedEvent
from gateway.scheduler import CoResidencyPair, CoResidencyStatus
from gateway.state.live import LiveState
from streams.events import serving as s
from tests.support.events import lease_granted, residency_loaded, stable_deployment
from tests.support.records import record


def proven(sequence: int, state: str) -> RecordedEvent:
    event = s.CoResidencyProven(
        accelerator_id="n1-gpu0",
        deployment_a="emb",
        deployment_b="rerank",
        generation=1,
        observed_bytes=1 << 30,
        state=state,  # type: ignore[arg-type]
    )
    return record(sequence, "accelerator", "n1-gpu0", event)


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


def test_a_residency_policy_change_reaches_a_model_already_resident() -> None:
    live = LiveState()
    envelope = s.ResourceEnvelope(required_bytes=100, peak_bytes=100, per_request_bytes=1, cold_load_ms=5)
    promoted = stable_deployment("emb", envelope)
    loaded = residency_loaded("l1", "n1-gpu0", measured_bytes=100)
    warm = s.ResidencyPolicyChanged(deployment_id="emb", residency=s.ResidencyPolicy(kind="always_warm"))
    live.apply(record(1, "deployment", "emb", promoted))
    live.apply(record(2, "accelerator", "n1-gpu0", loaded))
    assert not live.accelerators["n1-gpu0"].residents[0].always_warm
    live.apply(record(3, "deployment", "emb", warm))
    resident = live.accelerators["n1-gpu0"].residents[0]
    assert resident.always_warm  # so it is never chosen for eviction
    assert resident.state.value == "loaded"


def health(sequence: int, model_ok: bool) -> RecordedEvent:
    checked = s.ResidencyHealthChecked(
        accelerator_id="n1-gpu0",
        deployment_id="emb",
        generation=1,
        job_id=f"h{sequence}",
        process_ok=True,
        runtime_ok=True,
        model_ok=model_ok,
        code="" if model_ok else "HEALTHCHECK_FAILED",
    )
    return record(sequence, "accelerator", "n1-gpu0", checked)


def test_a_failed_health_check_marks_its_deployment_unhealthy_until_a_check_passes() -> None:
    live = LiveState()
    live.apply(health(1, model_ok=False))
    assert live.unhealthy == {"emb": "HEALTHCHECK_FAILED"}  # placement refuses: RUNTIME_UNHEALTHY
    live.apply(health(2, model_ok=True))
    assert live.unhealthy == {}


def released(lease_id: str) -> s.LeaseReleased:
    return s.LeaseReleased(lease_id=lease_id, accelerator_id="n1-gpu0", outcome="completed")


def test_another_writers_event_folded_while_ours_are_staged_interrupts_them() -> None:
    live = LiveState()
    live.stage("n1-gpu0", [released("ours")])
    live.apply(record(7, "accelerator", "n1-gpu0", released("theirs")))
    assert live.interrupted == {"n1-gpu0"}


def test_the_echo_of_our_own_staged_event_does_not_interrupt_them() -> None:
    live = LiveState()
    live.stage("n1-gpu0", [released("ours")])
    live.apply(record(7, "accelerator", "n1-gpu0", released("ours")))
    assert live.interrupted == set()


def test_an_interruption_ends_once_nothing_of_ours_is_staged() -> None:
    live = LiveState()
    live.stage("n1-gpu0", [released("ours")])
    live.apply(record(7, "accelerator", "n1-gpu0", released("theirs")))
    live.unstage(
        "n1-gpu0", 1
    )  # ours acknowledged: the server checked it against the version it was sent with
    assert live.interrupted == set()


LATER = datetime(2026, 12, 2, tzinfo=UTC)


def test_a_reconciliation_drops_the_lease_grants_of_what_the_agent_no_longer_holds() -> None:
    live = LiveState()
    for sequence, deployment in ((1, "emb"), (2, "rerank")):
        grant = lease_granted(f"lease-{deployment}", "n1-gpu0", LATER, deployment_id=deployment)
        live.apply(record(sequence, "accelerator", "n1-gpu0", grant))
    reconciled = s.ResidencyReconciled(
        accelerator_id="n1-gpu0", generation=2, held=("rerank",), dropped=("emb",)
    )
    live.apply(record(3, "accelerator", "n1-gpu0", reconciled))
    assert list(live.lease_grants) == ["lease-rerank"]


def load_requested(load_id: str, required_bytes: int) -> s.ResidencyLoadRequested:
    return s.ResidencyLoadRequested(
        load_id=load_id,
        accelerator_id="n1-gpu0",
        node_id="n1",
        deployment_id="emb",
        required_bytes=required_bytes,
        reason="request",
    )


def loaded_after_reserving(measured_bytes: int) -> LiveState:
    """A live view where `emb` (its envelope 100 bytes) was loaded after reserving 100 bytes, and
    measured `measured_bytes`."""
    live = LiveState()
    envelope = s.ResourceEnvelope(required_bytes=100, peak_bytes=100, per_request_bytes=1, cold_load_ms=5)
    live.apply(record(1, "deployment", "emb", stable_deployment("emb", envelope)))
    live.apply(record(2, "accelerator", "n1-gpu0", load_requested("l1", 100)))
    live.apply(
        record(3, "accelerator", "n1-gpu0", residency_loaded("l1", "n1-gpu0", measured_bytes=measured_bytes))
    )
    return live


def test_a_load_measured_past_its_reservation_makes_the_envelope_stale_for_cold_loads() -> None:
    live = loaded_after_reserving(145)
    reason = live.outgrown_envelope(live.catalog.deployments["emb"])
    assert reason is not None
    assert "measured 145 bytes, more than the 100" in reason


def test_a_load_measured_within_its_reservation_leaves_the_envelope_as_it_is() -> None:
    live = loaded_after_reserving(100)
    assert live.outgrown_envelope(live.catalog.deployments["emb"]) is None


def test_a_new_probe_promoted_after_an_outgrown_load_holds_again() -> None:
    live = loaded_after_reserving(145)
    bigger = s.ResourceEnvelope(required_bytes=200, peak_bytes=150, per_request_bytes=1, cold_load_ms=5)
    reprobed = msgspec.structs.replace(stable_deployment("emb", bigger), probe_id="probe-2")
    live.apply(record(4, "deployment", "emb", reprobed))
    assert live.outgrown_envelope(live.catalog.deployments["emb"]) is None
