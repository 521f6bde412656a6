"""Decisions of candidates, deployments and projects: refusals carry their code and no events."""

from __future__ import annotations

from datetime import timedelta

import msgspec
import pytest

from gateway.deployments.commands import DrainDeployment
from gateway.deployments.decide import decide_deployment
from gateway.deployments.evolve import evolve_deployment
from gateway.deployments.model import DeploymentState
from gateway.promotion.commands import CreateCandidate, MarkLabReady, RequestProbe, SetNodeEnabled
from gateway.promotion.decide import decide_approval, decide_candidate, decide_node
from gateway.promotion.deploy import PromotionFacts, plan_promotion
from gateway.promotion.envelope import envelope_from_probe
from gateway.promotion.evidence import gather
from gateway.promotion.evolve import evolve_approval
from gateway.promotion.gates import compatibility, production_gates
from gateway.promotion.model import ApprovalState, ProjectState
from gateway.promotion.projects import FitEvidence, RecordFit, decide_project, fit_gates
from streams.codes import ServingError
from streams.events import control as c
from streams.events import serving as s
from tests.unit.promotion.builders import (
    NOW,
    approve,
    artifacts,
    candidate,
    completed,
    facts,
    lab_approval,
    node,
    probe,
)


def request_probe(approval: ApprovalState | None, node_id: str = "node-1") -> RequestProbe:
    return RequestProbe("probe-2", node_id, "node-1-cpu0", approval, "la-1")


@pytest.mark.parametrize(
    "approval",
    [
        None,
        lab_approval(expires_at=NOW - timedelta(seconds=1)),
        lab_approval(revoked=True),
        lab_approval(candidate_id="someone-else"),
        lab_approval(node_ids=("node-2",)),
    ],
)
def test_a_probe_needs_a_current_lab_approval_for_its_node(approval: ApprovalState | None) -> None:
    with pytest.raises(ServingError) as refused:
        decide_candidate(candidate(), request_probe(approval), NOW)
    assert refused.value.code == "LAB_APPROVAL_STALE"


def test_only_complete_evidence_makes_a_candidate_lab_ready() -> None:
    weak = candidate(probes={"probe-1": probe(unload_reclaimed_bytes=0)}, lab_ready_probe="")
    assert decide_candidate(weak, MarkLabReady("probe-1"), NOW) == []
    blind = candidate(probes={"probe-1": probe(loaded_bytes=100)}, lab_ready_probe="")  # loaded == baseline
    assert decide_candidate(blind, MarkLabReady("probe-1"), NOW) == []
    fresh = candidate(lab_ready_probe="")
    assert len(decide_candidate(fresh, MarkLabReady("probe-1"), NOW)) == 1


def test_a_probe_whose_process_memory_did_not_grow_makes_a_candidate_lab_ready_on_its_weights() -> None:
    flat = candidate(probes={"probe-1": probe(loaded_bytes=100, weights_bytes=64)}, lab_ready_probe="")
    assert len(decide_candidate(flat, MarkLabReady("probe-1"), NOW)) == 1


@pytest.mark.parametrize(
    "measured",
    [
        {"output_dimension": 1024},
        {"output_normalized": False},
        {"output_dimension": 0},  # a probe that measured nothing
    ],
)
def test_a_probe_whose_output_is_not_the_declared_space_does_not_make_it_lab_ready(
    measured: dict[str, object],
) -> None:
    mismatched = candidate(probes={"probe-1": probe(**measured)}, lab_ready_probe="")
    assert decide_candidate(mismatched, MarkLabReady("probe-1"), NOW) == []


def test_an_embedding_candidate_must_declare_its_space() -> None:
    command = CreateCandidate(
        "cand-2", "rag.embedding@1", "as-minilm", {"dimension": "384"}, {}, "rag.embedding@1"
    )
    with pytest.raises(ServingError) as refused:
        decide_candidate(None, command, NOW)
    assert refused.value.code == "PROFILE_SEMANTICS_INVALID"


def test_an_embedding_candidate_created_without_a_profile_is_told_what_to_declare() -> None:
    command = CreateCandidate("cand-3", "rag.embedding@1", "as-minilm", {}, {}, "rag.embedding@1")
    with pytest.raises(ServingError) as refused:
        decide_candidate(None, command, NOW)
    assert (refused.value.code, refused.value.param) == ("PROFILE_SEMANTICS_INVALID", "runtime_profile")
    assert "--profile dimension=384" in refused.value.message


def test_a_missing_setting_is_named_as_missing_not_as_an_empty_number() -> None:
    command = CreateCandidate(
        "cand-4", "rag.embedding@1", "as-minilm", {"normalized": "true"}, {}, "rag.embedding@1"
    )
    with pytest.raises(ServingError) as refused:
        decide_candidate(None, command, NOW)
    assert refused.value.message == "`dimension` is required"


def test_a_command_for_a_candidate_that_does_not_exist_says_so() -> None:
    with pytest.raises(ServingError) as refused:
        decide_candidate(None, MarkLabReady("probe-1"), NOW)
    assert (refused.value.code, refused.value.http_status) == ("CANDIDATE_NOT_FOUND", 404)
    assert "candidates list" in refused.value.message


def promotion(deployments: tuple[DeploymentState, ...] = (), **changes: object) -> PromotionFacts:
    f = facts()
    assert f.candidate is not None
    current = gather(f.candidate, f.artifacts, f.node, f.probe, compatibility(f), "reviewed")
    (event,) = decide_approval(None, approve(current), NOW)
    base = PromotionFacts(
        candidate_id="cand-1", approval=evolve_approval(None, event, 1), candidate=f.candidate,
        artifacts=f.artifacts, probe=f.probe, node=f.node, current=current, failures=tuple(production_gates(f)),
        contract_known=True, deployments=deployments,
    )  # fmt: skip
    return msgspec.structs.replace(base, **changes)


def test_promotion_takes_its_envelope_from_the_probe_and_its_identity_from_the_config() -> None:
    plan = plan_promotion(promotion())
    (promoted,) = plan.events
    assert isinstance(promoted, s.DeploymentPromoted)
    assert promoted.envelope.required_bytes == 200  # loaded - baseline
    assert promoted.embedding_space is not None
    assert promoted.embedding_space.dimension == 384
    assert promoted.manifest_sha256 == artifacts().manifest_sha256  # the approved files, and only they
    assert plan_promotion(promotion()).deployment_id == plan.deployment_id


@pytest.mark.parametrize(
    ("loaded_bytes", "weights_bytes", "required_bytes"),
    [(300, 64, 200), (100, 64, 64), (90, 64, 64), (300, 0, 200)],  # the baseline is 100
)
def test_an_envelope_requires_what_loading_added_and_at_the_least_the_weights(
    loaded_bytes: int, weights_bytes: int, required_bytes: int
) -> None:
    measured = completed(loaded_bytes=loaded_bytes, weights_bytes=weights_bytes)
    assert envelope_from_probe(measured).required_bytes == required_bytes


def test_an_envelope_peaks_at_what_the_model_holds_plus_the_warm_ups_growth() -> None:
    flat = envelope_from_probe(completed(loaded_bytes=100, weights_bytes=64, peak_bytes=150))  # baseline 100
    assert (flat.required_bytes, flat.peak_bytes) == (64, 114)
    grown = envelope_from_probe(completed())  # baseline 100, loaded 300, peak 350
    assert (grown.required_bytes, grown.peak_bytes) == (200, 250)


def test_promoting_an_existing_config_returns_it_before_the_stable_check() -> None:
    plan = plan_promotion(promotion())
    existing = evolve_deployment(None, plan.events[0], 5)
    assert existing is not None
    again = plan_promotion(promotion((existing,)))
    assert again.events == []
    assert again.deployment_id == plan.deployment_id


def test_a_second_stable_deployment_waits_until_the_first_is_drained() -> None:
    other = evolve_deployment(None, plan_promotion(promotion()).events[0], 5)
    assert other is not None
    other = msgspec.structs.replace(other, deployment_id="dep-other")
    f = promotion((other,), candidate=candidate(deployment_config={"model_name": "minilm-2"}))
    with pytest.raises(ServingError) as refused:
        plan_promotion(f)
    assert refused.value.code == "STABLE_DEPLOYMENT_EXISTS"
    drained = msgspec.structs.replace(other, draining=True, drained=True, active=False)
    assert plan_promotion(promotion((drained,))).events


def test_a_promotion_on_moved_facts_is_stale() -> None:
    f = promotion()
    assert f.current is not None
    moved = msgspec.structs.replace(f.current, risk_flags=("pickle_present",))
    with pytest.raises(ServingError) as refused:
        plan_promotion(msgspec.structs.replace(f, current=moved))
    assert refused.value.code == "PRODUCTION_APPROVAL_STALE"
    assert refused.value.details["changed_facts"] == ["risk_flags"]


def test_a_busy_deployment_is_not_drained() -> None:
    plan = plan_promotion(promotion())
    state = evolve_deployment(None, plan.events[0], 5)
    with pytest.raises(ServingError) as refused:
        decide_deployment(state, DrainDeployment(plan.deployment_id, active_requests=2), NOW)
    assert refused.value.code == "DEPLOYMENT_BUSY"
    (draining,) = decide_deployment(state, DrainDeployment(plan.deployment_id, active_requests=0), NOW)
    assert isinstance(draining, s.DeploymentDraining)


def fit(**changes: object) -> FitEvidence:
    base = FitEvidence(
        deployment_id="dep-1", evidence_class="OWNER_PHOTO", recommendation="PROMOTION_ELIGIBLE",
        production_validation="SATISFIED", case_count=12,
    )  # fmt: skip
    return msgspec.structs.replace(base, **changes)


@pytest.mark.parametrize(
    ("evidence", "failed"),
    [
        (fit(), []),
        (fit(case_count=0), ["PROJECT_FIT_GATES_FAILED", "PROJECT_PRODUCTION_VALIDATION_FAILED"]),
        (fit(production_validation="PENDING"), ["PROJECT_FIT_GATES_FAILED"]),
        (fit(recommendation="HOLD"), ["PROJECT_PRODUCTION_VALIDATION_FAILED"]),
        (fit(recommendation="HOLD", production_validation="PENDING", case_count=0), []),
    ],
)
def test_project_fit_gates(evidence: FitEvidence, failed: list[str]) -> None:
    assert fit_gates(evidence) == failed


def test_project_fit_is_recorded_once_per_digest() -> None:
    plan = plan_promotion(promotion())
    deployment = evolve_deployment(None, plan.events[0], 5)
    project = ProjectState(project_id="pr-1", name="docs", channels={"rag.embedding@1": "stable"})
    (recorded,) = decide_project(project, RecordFit(fit(), deployment), NOW)
    with_fit = msgspec.structs.replace(project, fit={"rag.embedding@1": recorded})
    assert decide_project(with_fit, RecordFit(fit(deployment_id="dep-2"), deployment), NOW) == []
    with pytest.raises(ServingError) as refused:
        decide_project(project, RecordFit(fit(case_count=0), deployment), NOW)
    assert refused.value.code == "PROJECT_FIT_GATES_FAILED"


def test_artifacts_builder_is_verified() -> None:
    assert artifacts().verified


def test_approving_revoked_facts_again_is_refused_and_the_revocation_stays() -> None:
    f = promotion()
    assert f.current is not None
    assert f.approval is not None
    (approved,) = decide_approval(None, approve(f.current), NOW)
    revoked = evolve_approval(
        f.approval, c.ApprovalRevoked(approval_id=f.approval.approval_id, reason="bad"), 2
    )
    assert revoked is not None
    with pytest.raises(ServingError) as refused:
        decide_approval(revoked, approve(f.current), NOW)
    assert refused.value.code == "PRODUCTION_APPROVAL_STALE"
    assert refused.value.details["revoked"] is True
    # A history that approved the same facts after revoking them still folds to revoked.
    folded = evolve_approval(revoked, approved, 3)
    assert folded is not None
    assert folded.status == "revoked"


def test_a_stale_approval_of_facts_that_came_back_is_approved_again() -> None:
    f = promotion()
    assert f.current is not None
    assert f.approval is not None
    stale = msgspec.structs.replace(f.approval, stale=True, stale_facts=("risk_flags",))
    (again,) = decide_approval(stale, approve(f.current), NOW)
    folded = evolve_approval(stale, again, 4)
    assert folded is not None
    assert folded.status == "approved"


def test_a_decommissioned_node_is_never_enabled_again() -> None:
    gone = node(enabled=False, decommissioned=True)
    with pytest.raises(ServingError) as refused:
        decide_node(gone, SetNodeEnabled("node-1", True, ""), NOW)
    assert refused.value.code == "STATE_CONFLICT"
    assert decide_node(gone, SetNodeEnabled("node-1", False, ""), NOW) == []
