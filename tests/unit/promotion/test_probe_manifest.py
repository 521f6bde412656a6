"""A probe records the manifest of the files it loaded; the evidence binds it, and a probe of other
files than the set holds is not compatible. Probes from before it was kept change nothing."""

from __future__ import annotations

import msgspec

from gateway.promotion.commands import RequestProbe
from gateway.promotion.decide import decide_candidate
from gateway.promotion.evidence import facts_of, fingerprint, gather
from gateway.promotion.evolve import evolve_candidate
from gateway.promotion.gates import GateFacts, compatibility
from gateway.promotion.model import ProbeRecord
from streams.events import control as c
from tests.unit.promotion.builders import (
    NOW,
    artifacts,
    candidate,
    completed,
    facts,
    lab_approval,
    probe,
    replace,
)

SET_MANIFEST = artifacts().manifest_sha256


def probed(manifest: str, echoed: str | None = None) -> ProbeRecord:
    result = completed(manifest_sha256=manifest if echoed is None else echoed)
    return replace(probe(), manifest_sha256=manifest, result=result)


def with_probe(record: ProbeRecord) -> GateFacts:
    return facts(candidate=candidate(probes={record.probe_id: record}), probe=record)


def probe_environment(f: GateFacts) -> dict[str, str]:
    assert f.candidate is not None
    evidence = gather(f.candidate, f.artifacts, f.node, f.probe, compatibility(f), "")
    return msgspec.json.decode(facts_of(evidence)["probe_environment"], type=dict[str, str])


def test_a_requested_probe_records_the_manifest_its_job_loads() -> None:
    command = RequestProbe(
        "probe-2", "node-1", "node-1-cpu0", lab_approval(), "la-1", manifest_sha256="m" * 64
    )
    (requested,) = decide_candidate(candidate(), command, NOW)
    assert isinstance(requested, c.ProbeRequested)
    assert requested.manifest_sha256 == "m" * 64
    state = evolve_candidate(candidate(), requested, 30)
    assert state is not None
    assert state.probes["probe-2"].manifest_sha256 == "m" * 64


def test_the_evidence_binds_the_probed_manifest() -> None:
    bound = with_probe(probed(SET_MANIFEST))
    assert probe_environment(bound)["manifest_sha256"] == SET_MANIFEST
    other = with_probe(probed("n" * 64))
    assert bound.candidate is not None
    assert other.candidate is not None
    one = gather(bound.candidate, bound.artifacts, bound.node, bound.probe, "compatible", "")
    two = gather(other.candidate, other.artifacts, other.node, other.probe, "compatible", "")
    assert fingerprint(one) != fingerprint(two)


def test_a_probe_of_other_files_than_the_set_holds_is_stale() -> None:
    assert compatibility(with_probe(probed(SET_MANIFEST))) == "compatible"
    assert compatibility(with_probe(probed("n" * 64))) == "stale"  # re-registered before the request
    assert compatibility(with_probe(probed(SET_MANIFEST, echoed="n" * 64))) == "stale"  # the agent ran others


def test_a_probe_from_before_manifests_were_kept_leaves_the_facts_as_approved() -> None:
    old = facts()
    assert old.probe is not None
    assert old.probe.manifest_sha256 == ""
    assert compatibility(old) == "compatible"
    assert probe_environment(old) == {
        "accelerator": "node-1-cpu0",
        "hardware_fingerprint": "hw-1",
        "runtime": "onnxruntime-cpu",
        "status": "completed",
    }
