"""The evidence fingerprint: it changes iff a fact changes; the same facts name the same approval."""

from __future__ import annotations

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from gateway.promotion.commands import MarkApprovalStale
from gateway.promotion.decide import decide_approval
from gateway.promotion.evidence import Evidence, approval_id_for, changed_facts, facts_of, fingerprint, gather
from gateway.promotion.evolve import evolve_approval
from gateway.promotion.gates import compatibility
from streams.events import control as c
from tests.unit.promotion.builders import NOW, approve, artifacts, facts, files, node, probe

hashes = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)


def evidence(**changes: object) -> Evidence:
    f = facts()
    assert f.candidate is not None
    base = gather(f.candidate, f.artifacts, f.node, f.probe, compatibility(f), "reviewed")
    return msgspec.structs.replace(base, **changes)


@given(left=hashes, right=hashes, review_a=st.text(max_size=8), review_b=st.text(max_size=8))
def test_the_fingerprint_changes_iff_a_fact_changes(
    left: str, right: str, review_a: str, review_b: str
) -> None:
    f = facts()
    assert f.candidate is not None
    one = files(c.ArtifactFile("extra.txt", left, 1, "text"))
    two = files(c.ArtifactFile("extra.txt", right, 1, "text"))
    a = gather(f.candidate, artifacts(files=one), f.node, f.probe, "compatible", review_a)
    b = gather(f.candidate, artifacts(files=two), f.node, f.probe, "compatible", review_b)
    same_facts = (left, review_a) == (right, review_b)
    assert (fingerprint(a) == fingerprint(b)) == same_facts
    assert (changed_facts(facts_of(a), b) == ()) == same_facts


def test_the_fingerprint_does_not_depend_on_file_order() -> None:
    f = facts()
    assert f.candidate is not None
    shuffled = artifacts(files=tuple(reversed(files())))
    assert fingerprint(gather(f.candidate, shuffled, f.node, f.probe, "compatible", "")) == fingerprint(
        gather(f.candidate, artifacts(), f.node, f.probe, "compatible", "")
    )


def test_changed_facts_name_what_moved() -> None:
    before = facts_of(evidence())
    assert changed_facts(before, evidence(node_hardware_fingerprint="hw-2")) == ("node_hardware_fingerprint",)


def test_approving_the_same_facts_twice_gives_the_same_approval_and_no_new_event() -> None:
    command = approve(evidence())
    (approved,) = decide_approval(None, command, NOW)
    assert isinstance(approved, c.ProductionApproved)
    assert approved.approval_id == approval_id_for(fingerprint(evidence()))
    state = evolve_approval(None, approved, 1)
    assert decide_approval(state, command, NOW) == []


def test_an_approval_whose_facts_moved_is_marked_stale_once() -> None:
    (approved,) = decide_approval(None, approve(evidence()), NOW)
    state = evolve_approval(None, approved, 1)
    moved = MarkApprovalStale(state.approval_id if state else "", evidence(artifact_status="quarantined"))
    (stale,) = decide_approval(state, moved, NOW)
    assert isinstance(stale, c.ApprovalMarkedStale)
    assert stale.changed_facts == ("artifact_status",)
    assert decide_approval(evolve_approval(state, stale, 2), moved, NOW) == []
    unchanged = MarkApprovalStale(approved.approval_id, evidence())
    assert decide_approval(state, unchanged, NOW) == []


def test_compatibility_goes_stale_when_files_or_hardware_change_after_the_probe() -> None:
    assert compatibility(facts()) == "compatible"
    assert compatibility(facts(artifacts=artifacts(registered_seq=50))) == "stale"
    assert compatibility(facts(node=node(registered_seq=50))) == "stale"
    assert compatibility(facts(probe=probe(hardware_fingerprint="elsewhere"))) == "stale"
