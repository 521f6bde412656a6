"""A measured envelope holds while its node is the hardware, with the runtime, the probe measured
on; otherwise placement refuses it as stale (SCHEDULER_STATE_STALE) until it is measured again."""

from __future__ import annotations

import msgspec

from gateway.scheduler import DEFAULT_POLICY, PlacementRequest
from gateway.scheduler.placement import plan_placement
from gateway.serving.envelopes import envelope_of
from gateway.serving.errors import rejection
from streams.events import control as c
from streams.events import serving as s
from tests.support.events import catalog_of, stable_deployment
from tests.unit.promotion.builders import completed

REGISTERED = c.NodeRegistered(
    node_id="node-1",
    hostname="h",
    hardware_fingerprint="hw-1",
    accelerators=(
        c.AcceleratorSpec(accelerator_id="node-1-cpu0", kind="cpu", name="cpu", total_bytes=1 << 30),
    ),
    protocol_capabilities=(),
    runtimes=("onnxruntime-cpu",),
    agent_version="1",
)
ENVELOPE = s.ResourceEnvelope(required_bytes=100, peak_bytes=120, per_request_bytes=5, cold_load_ms=10.0)
PROMOTED = msgspec.structs.replace(
    stable_deployment("emb", ENVELOPE), candidate_id="cand-1", probe_id="probe-1"
)


def test_an_envelope_holds_on_the_hardware_and_runtime_it_was_measured_on() -> None:
    catalog = catalog_of(REGISTERED, completed(), PROMOTED)
    assert catalog.stale_envelope(catalog.deployments["emb"]) is None


def test_an_envelope_is_stale_once_its_node_registers_other_hardware() -> None:
    moved = msgspec.structs.replace(REGISTERED, hardware_fingerprint="hw-2")
    catalog = catalog_of(REGISTERED, completed(), PROMOTED, moved)
    assert "hardware changed" in (catalog.stale_envelope(catalog.deployments["emb"]) or "")


def test_an_envelope_is_stale_once_its_runtime_is_gone_from_the_node() -> None:
    without = msgspec.structs.replace(REGISTERED, runtimes=("tensorrt",))
    catalog = catalog_of(REGISTERED, completed(), PROMOTED, without)
    assert "onnxruntime-cpu" in (catalog.stale_envelope(catalog.deployments["emb"]) or "")


def test_a_later_probe_does_not_vouch_for_an_envelope_it_did_not_measure() -> None:
    moved = msgspec.structs.replace(REGISTERED, hardware_fingerprint="hw-2")
    again = completed(probe_id="probe-2", hardware_fingerprint="hw-2")
    catalog = catalog_of(REGISTERED, completed(), PROMOTED, moved, again)
    assert catalog.stale_envelope(catalog.deployments["emb"]) is not None


def test_promoting_the_new_measurement_makes_the_envelope_hold_again() -> None:
    moved = msgspec.structs.replace(REGISTERED, hardware_fingerprint="hw-2")
    again = completed(probe_id="probe-2", hardware_fingerprint="hw-2")
    promoted_again = msgspec.structs.replace(PROMOTED, probe_id="probe-2")
    catalog = catalog_of(REGISTERED, completed(), PROMOTED, moved, again, promoted_again)
    assert catalog.stale_envelope(catalog.deployments["emb"]) is None


def test_a_stale_envelope_is_refused_with_scheduler_state_stale_and_its_reason() -> None:
    decision = plan_placement(
        [],
        envelope_of(catalog_of(PROMOTED).deployments["emb"], stale=True),
        PlacementRequest(),
        DEFAULT_POLICY,
        0.0,
    )
    error = rejection(decision, "emb", "the node's hardware changed")
    assert (error.code, error.http_status) == ("SCHEDULER_STATE_STALE", 503)
    assert error.details["stale_reason"] == "the node's hardware changed"
