"""An envelope is measured on one hardware class (accelerator model, runtime, precision): the
catalogue keeps which, and placement refuses accelerators of another class with a code that says
to probe there (ENVELOPE_CLASS_UNMEASURED), never reusing the measurement."""

from __future__ import annotations

import msgspec

from gateway.scheduler import DEFAULT_POLICY, AcceleratorState, PlacementRequest
from gateway.scheduler.placement import plan_placement
from gateway.scheduler.state import HardwareClass
from gateway.serving.envelopes import envelope_of
from gateway.serving.errors import rejection
from streams.events import control as c
from tests.support.events import catalog_of
from tests.unit.gateway.test_envelope_staleness import PROMOTED, REGISTERED
from tests.unit.promotion.builders import completed

CANDIDATE = c.CandidateRegistered(
    candidate_id="cand-1",
    capability="rag.embedding@1",
    artifact_set_id="as-minilm",
    runtime_profile={"precision": "fp32"},
    deployment_config={},
)


def test_the_catalogue_keeps_the_class_an_envelope_was_measured_on() -> None:
    catalog = catalog_of(REGISTERED, CANDIDATE, completed(), PROMOTED)
    measured = catalog.measured_class(catalog.deployments["emb"])
    assert measured == HardwareClass("cpu:cpu", "onnxruntime-cpu", "fp32")


def test_an_accelerator_of_another_model_is_refused_with_a_code_that_says_to_probe_there() -> None:
    catalog = catalog_of(REGISTERED, CANDIDATE, completed(), PROMOTED)
    deployment = catalog.deployments["emb"]
    envelope = envelope_of(deployment, measured_on=catalog.measured_class(deployment))
    other = AcceleratorState(
        accelerator_id="node-2-gpu0",
        node_id="node-2",
        total_bytes=1 << 34,
        hardware_model="gpu:L4 (sm 8.9)",
        runtimes=("onnxruntime-cpu",),
    )
    error = rejection(plan_placement([other], envelope, PlacementRequest(), DEFAULT_POLICY, 0.0), "emb")
    assert (error.code, error.http_status) == ("ENVELOPE_CLASS_UNMEASURED", 503)
    assert "probe" in error.message
    same = msgspec.structs.replace(other, hardware_model="cpu:cpu", observed_used_bytes=0, observed_at=0.0)
    assert plan_placement([same], envelope, PlacementRequest(), DEFAULT_POLICY, 0.0).verdict.admits
