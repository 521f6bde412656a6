"""The production gates, one broken fact at a time, and their order."""

from __future__ import annotations

import pytest

from gateway.promotion.gates import GateFacts, production_gates, refusal
from streams.events import control as c
from tests.unit.promotion.builders import artifacts, candidate, facts, files, node, probe, replace


def codes(f: GateFacts) -> list[str]:
    return [failure.code for failure in production_gates(f)]


def test_a_candidate_with_complete_evidence_passes_every_gate() -> None:
    assert codes(facts()) == []


def test_a_probe_whose_process_memory_did_not_grow_stands_on_the_weights_it_loaded() -> None:
    # A CPU device's RSS can stay flat while a small model loads (pages freed earlier reused).
    assert codes(facts(probe=probe(loaded_bytes=100, weights_bytes=64))) == []


@pytest.mark.parametrize(
    ("broken", "code"),
    [
        (facts(candidate=candidate(lab_ready_probe="")), "CANDIDATE_NOT_LAB_READY"),
        (facts(already_production=True), "CANDIDATE_NOT_LAB_READY"),
        (facts(probe=None), "RUNTIME_PROBE_REQUIRED"),
        (facts(probe=probe(loaded_bytes=100)), "RUNTIME_PROBE_REQUIRED"),  # loaded == baseline
        (facts(probe=probe(loaded_bytes=0, peak_bytes=0)), "RUNTIME_PROBE_REQUIRED"),
        (facts(artifacts=artifacts(registered_seq=99)), "COMPATIBILITY_STALE"),
        (facts(node=node(hardware_fingerprint="hw-2")), "COMPATIBILITY_STALE"),
        (facts(artifacts=artifacts(verified_manifest="")), "ARTIFACT_NOT_VERIFIED"),
        (facts(node=node(enabled=False)), "NO_ELIGIBLE_NODE"),
        (facts(node=node(production_eligible=False)), "NO_ELIGIBLE_NODE"),
        (facts(node_online=False), "NO_ELIGIBLE_NODE"),
        (facts(node=node(protocol_capabilities=("deployment.load.v1",))), "NODE_SERVING_CAPABILITY_MISSING"),
        (facts(artifacts=artifacts(quarantined=True)), "ARTIFACT_NOT_VERIFIED"),
        (
            facts(artifacts=artifacts(files=files(c.ArtifactFile("w.bin", "c" * 64, 5, "pickle")))),
            "PICKLE_PRESENT",
        ),
        (facts(artifacts=artifacts(risk_flags=("Remote_Code_Required",))), "REMOTE_CODE_REQUIRED"),
        (
            facts(probe=probe(health=c.HealthLayers(process=True, runtime=True, model=False))),
            "HEALTHCHECK_FAILED",
        ),
        (facts(probe=probe(output_valid=False)), "INVALID_OUTPUT"),
        (facts(probe=probe(output_dimension=1024)), "INVALID_OUTPUT"),
        (facts(probe=probe(output_normalized=False)), "INVALID_OUTPUT"),
        (facts(probe=probe(output_dimension=0)), "INVALID_OUTPUT"),
        (
            facts(candidate=candidate(runtime_profile={**candidate().runtime_profile, "dimension": "1024"})),
            "INVALID_OUTPUT",
        ),
        (
            facts(
                candidate=candidate(
                    runtime_profile={**candidate().runtime_profile, "truncatable_dimensions": "768,256"}
                )
            ),
            "INVALID_OUTPUT",
        ),
        (facts(probe=probe(unload_reclaimed_bytes=0)), "RUNTIME_SECURITY_GATE_FAILED"),
        (facts(probe=probe(runtime="remote-hub")), "RUNTIME_SECURITY_GATE_FAILED"),
    ],
)
def test_each_gate_refuses_its_broken_fact(broken: GateFacts, code: str) -> None:
    assert codes(broken) == [code]


def test_failures_come_in_the_reference_order_and_the_first_is_the_refusal() -> None:
    risky = artifacts(
        files=files(c.ArtifactFile("w.bin", "c" * 64, 5, "pickle")), risk_flags=("remote_code_required",)
    )
    broken = facts(artifacts=risky, node=node(enabled=False))
    assert codes(broken) == ["NO_ELIGIBLE_NODE", "PICKLE_PRESENT", "REMOTE_CODE_REQUIRED"]
    error = refusal(production_gates(broken))
    assert error.code == "NO_ELIGIBLE_NODE"
    assert error.http_status == 409
    assert error.details["failed_gates"] == ["NO_ELIGIBLE_NODE", "PICKLE_PRESENT", "REMOTE_CODE_REQUIRED"]


def test_missing_serving_protocols_are_listed_sorted() -> None:
    (failure,) = production_gates(facts(node=node(protocol_capabilities=("deployment.load.v1",))))
    assert failure.details["missing"] == sorted(failure.details["missing"])  # type: ignore[type-var]
    assert "deployment.unload.v1" in failure.details["missing"]  # type: ignore[operator]


def test_an_unknown_candidate_is_not_lab_ready() -> None:
    assert codes(replace(facts(), candidate=None, probe=None))[0] == "CANDIDATE_NOT_LAB_READY"


@pytest.mark.parametrize("capability", ["rag.reranking@1", "document.ocr@1", "speech.transcription@1"])
def test_a_capability_whose_contract_fixes_its_output_needs_no_profile(capability: str) -> None:
    unprofiled = facts(
        candidate=candidate(capability=capability, runtime_profile={}),
        artifacts=artifacts(capability=capability),
    )
    assert codes(unprofiled) == []


def test_an_embedding_without_its_declared_space_is_refused() -> None:
    (failure,) = [
        f
        for f in production_gates(facts(candidate=candidate(runtime_profile={})))
        if f.code == "ARTIFACT_NOT_VERIFIED"
    ]
    assert "dimension" in failure.message
