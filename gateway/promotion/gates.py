"""The production gates, in the reference's order (§5.1). Pure: facts in, failures out.

`production_gates` evaluates every gate and returns every failure in order (each code once); the
first one is what a refusal reports, the rest travel in its details. A gate whose input an
earlier gate found missing is not evaluated again (no probe: no health to judge).
"""

from __future__ import annotations

import msgspec

from gateway.promotion.model import (
    OFFLINE_LOCAL_RUNTIMES,
    SERVING_PROTOCOLS,
    ArtifactSetState,
    CandidateState,
    NodeState,
    ProbeRecord,
)
from gateway.promotion.profile import check_runtime_profile, output_mismatch
from streams.codes import ServingError


class GateFailure(msgspec.Struct, frozen=True):
    code: str
    message: str
    details: dict[str, object] = msgspec.field(default_factory=dict)


class GateFacts(msgspec.Struct, frozen=True, kw_only=True):
    candidate: CandidateState | None
    probe: ProbeRecord | None  # the probe the approval rests on
    artifacts: ArtifactSetState | None
    node: NodeState | None  # the probe's node: where the deployment will run
    node_online: bool
    already_production: bool
    contract_known: bool


def compatibility(facts: GateFacts) -> str:
    """`compatible` while the probe still describes today's candidate, files and node."""
    cand, probe, arts, node = facts.candidate, facts.probe, facts.artifacts, facts.node
    if cand is None or probe is None or probe.result is None or arts is None or node is None:
        return "unassessed"
    if not facts.contract_known or arts.capability != cand.capability:
        return "incompatible"
    if arts.registered_seq > probe.requested_seq or node.registered_seq > probe.requested_seq:
        return "stale"  # files or hardware changed after the probe
    probed = {probe.manifest_sha256, probe.result.manifest_sha256} - {""}  # "": a probe from an old log
    if probed - {arts.manifest_sha256}:
        return "stale"  # the probe ran other files than the set holds
    if probe.result.hardware_fingerprint != node.hardware_fingerprint:
        return "stale"
    return "compatible"


def production_gates(facts: GateFacts) -> list[GateFailure]:
    out: list[GateFailure] = []
    cand, probe, arts, node = facts.candidate, facts.probe, facts.artifacts, facts.node

    def fail(code: str, message: str, **details: object) -> None:
        if all(f.code != code for f in out):
            out.append(GateFailure(code, message, dict(details)))

    # 1
    if cand is None or cand.status != "lab_ready" or facts.already_production:
        why = (
            "unknown"
            if cand is None
            else "already in production"
            if facts.already_production
            else cand.status
        )
        fail("CANDIDATE_NOT_LAB_READY", f"the candidate is not lab_ready ({why})")
    # 2
    result = probe.result if probe and probe.status == "completed" else None
    if result is None:
        fail("RUNTIME_PROBE_REQUIRED", "no completed runtime probe of this candidate")
    elif result.measured_bytes <= 0:
        # The deployment's memory envelope comes from this measurement: without it the scheduler
        # would admit the model as if it took no memory.
        fail(
            "RUNTIME_PROBE_REQUIRED",
            "the probe measured no memory taken by the loaded model: probe again",
            baseline_bytes=result.baseline_bytes,
            loaded_bytes=result.loaded_bytes,
            weights_bytes=result.weights_bytes,
        )
    # 3
    verdict = compatibility(facts)
    if result is not None and verdict != "compatible":
        fail(
            "COMPATIBILITY_STALE", f"the probe's compatibility assessment is {verdict}", compatibility=verdict
        )
    # 4
    incomplete = _incomplete_profile(cand) if cand is not None else None
    if incomplete:
        fail("ARTIFACT_NOT_VERIFIED", f"the candidate's runtime profile is incomplete: {incomplete}")
    if arts is None or not arts.verified:
        fail("ARTIFACT_NOT_VERIFIED", "the artifact set is missing or not verified by its node's agent")
    # 5, 6
    if result is not None:
        if (
            node is None
            or node.decommissioned
            or not node.enabled
            or not node.production_eligible
            or not facts.node_online
        ):
            fail(
                "NO_ELIGIBLE_NODE", "the probed node is missing, disabled, not production-eligible or offline"
            )
        missing = sorted(set(SERVING_PROTOCOLS) - set(node.protocol_capabilities if node else ()))
        if node is not None and missing:
            fail("NODE_SERVING_CAPABILITY_MISSING", "the node lacks serving protocols", missing=missing)
    # 7, 8, 9
    if arts is not None:
        if arts.quarantined:
            fail("ARTIFACT_NOT_VERIFIED", f"the artifact set is quarantined: {arts.quarantine_reason}")
        pickles = sorted(f.path for f in arts.files if f.format == "pickle")
        if pickles or "pickle_present" in arts.risk_flags:
            fail("PICKLE_PRESENT", "the artifact set holds pickle files", files=pickles)
        if any("remote_code" in flag.casefold() for flag in arts.risk_flags):
            fail("REMOTE_CODE_REQUIRED", "the artifact set requires remote code")
    # 10, 11, 12
    if result is not None:
        health = result.health
        if not (health.process and health.runtime and health.model):
            fail("HEALTHCHECK_FAILED", f"probe health not all healthy: {health.detail}")
        if not result.output_valid:
            fail("INVALID_OUTPUT", "the probe's test inference broke the contract")
        mismatch = output_mismatch(cand.capability, cand.runtime_profile, result) if cand else ""
        if mismatch:
            fail("INVALID_OUTPUT", f"the probe's output is not the declared profile: {mismatch}")
        if result.unload_reclaimed_bytes <= 0 or result.runtime not in OFFLINE_LOCAL_RUNTIMES:
            fail(
                "RUNTIME_SECURITY_GATE_FAILED",
                "the probe must show memory reclaimed on unload and an offline, local-only runtime",
                runtime=result.runtime,
            )
    return out


def refusal(failures: list[GateFailure]) -> ServingError:
    first = failures[0]
    details = {**first.details, "failed_gates": [f.code for f in failures]}
    return ServingError(first.code, first.message, http_status=409, details=details)


def _incomplete_profile(cand: CandidateState) -> str | None:
    """What the candidate's runtime profile lacks for its capability (None: nothing). Only an
    embedding declares one (its space); an empty profile is complete for the other capabilities."""
    try:
        check_runtime_profile(cand.capability, cand.runtime_profile)
    except ServingError as error:
        return error.message
    return None
