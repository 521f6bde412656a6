"""A snapshot of the live view holds what the events made of it, and nothing that was not read from
them; a stored one that is not usable says why."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec
import pytest

from gateway.state.live import LiveState
from gateway.state.snapshot import (
    SnapshotUnusable,
    capture,
    encode_record,
    encode_state,
    open_record,
    record_of,
    restore,
)
from streams.events import serving as s
from streams.messages import AcceleratorTelemetry, WorkerMemory
from tests.support.events import lease_granted, residency_loaded, stable_deployment
from tests.support.records import record

ACC = "n1-gpu0"


def folded_view() -> LiveState:
    live = LiveState()
    envelope = s.ResourceEnvelope(required_bytes=100, peak_bytes=100, per_request_bytes=1, cold_load_ms=5)
    expires = datetime(2026, 12, 1, tzinfo=UTC) + timedelta(minutes=5)
    proof = s.CoResidencyProven(
        accelerator_id=ACC, deployment_a="emb", deployment_b="rerank", generation=1,
        observed_bytes=1 << 30, state="PROVEN_SAFE",
    )  # fmt: skip
    events = [
        ("deployment", "emb", stable_deployment("emb", envelope)),
        ("accelerator", ACC, residency_loaded("l1", ACC, measured_bytes=100)),
        ("accelerator", ACC, lease_granted("held", ACC, expires)),
        ("accelerator", ACC, lease_granted("gone", ACC, expires)),
        ("accelerator", ACC, s.LeaseReleased(lease_id="gone", accelerator_id=ACC, outcome="completed")),
        ("accelerator", ACC, proof),
    ]
    for sequence, (aggregate, aggregate_id, event) in enumerate(events, start=1):
        live.apply(record(sequence, aggregate, aggregate_id, event))
    return live


def test_a_view_restored_from_its_snapshot_holds_the_same_books() -> None:
    view = folded_view()
    stored = encode_record(record_of(capture(view), view.applied, "e6"))
    opened, state = open_record(stored)
    restored = LiveState()
    restore(restored, state, opened.sequence)
    assert encode_state(capture(restored)) == encode_state(capture(view))
    assert restored.holds_lease(ACC, "held")
    assert not restored.holds_lease(ACC, "gone")
    assert (restored.applied, restored.followed, restored.versions) == (6, 6, {ACC: 6})


def test_a_snapshot_leaves_telemetry_out() -> None:
    # (a replay has only the events: a capture that kept any of it would disagree with its replay)
    view = folded_view()
    before = encode_state(capture(view))
    view.apply_telemetry(
        AcceleratorTelemetry(
            node_id="n1", accelerator_id=ACC, generation=1, total_bytes=1 << 34, used_bytes=1 << 30,
            process_bytes=1 << 29, observed_at_unix_ms=1, residencies=[], healthy=True, cached_sets=["x"],
            workers=[WorkerMemory(deployment_id="emb", bytes=300 << 20)],
        )
    )  # fmt: skip
    assert [r.worker_bytes for r in view.accelerators[ACC].residents] == [300 << 20]
    assert encode_state(capture(view)) == before


def test_bytes_that_are_no_snapshot_are_refused_as_unusable() -> None:
    with pytest.raises(SnapshotUnusable, match="undecodable"):
        open_record(b"not a snapshot")


def test_a_snapshot_whose_state_was_changed_after_its_digest_is_refused() -> None:
    view = folded_view()
    honest = record_of(capture(view), view.applied, "e6")
    other = encode_state(capture(LiveState()))
    with pytest.raises(SnapshotUnusable, match="digest"):
        open_record(encode_record(msgspec.structs.replace(honest, state=other)))


def test_a_snapshot_is_restored_only_into_a_view_that_folded_nothing() -> None:
    view = folded_view()
    with pytest.raises(RuntimeError):
        restore(view, capture(view), view.applied)
