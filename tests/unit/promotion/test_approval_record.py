"""A production approval records a supply-chain review, who approved and why; missing one is
refused INVALID_INPUT naming it, and approvals recorded before they were required still fold."""

from __future__ import annotations

import msgspec
import pytest

from gateway.promotion.decide import decide_approval
from gateway.promotion.evidence import Evidence, gather
from gateway.promotion.evolve import evolve_approval
from gateway.promotion.gates import compatibility
from streams.codes import ServingError
from streams.events import control as c
from tests.unit.promotion.builders import NOW, approve, facts


def evidence(review: str) -> Evidence:
    f = facts()
    assert f.candidate is not None
    return gather(f.candidate, f.artifacts, f.node, f.probe, compatibility(f), review)


def test_the_approval_records_its_approver_and_reason() -> None:
    (event,) = decide_approval(
        None, approve(evidence("pulled from the vendor's mirror, hashes checked")), NOW
    )
    assert isinstance(event, c.ProductionApproved)
    state = evolve_approval(None, event, 1)
    assert state is not None
    assert (state.approved_by, state.reason) == ("ops-1", "the weekly release")


@pytest.mark.parametrize(
    ("review", "changes", "missing"),
    [
        ("", {}, "supply_chain_review"),
        ("  ", {}, "supply_chain_review"),
        ("reviewed", {"reason": ""}, "reason"),
        ("reviewed", {"reason": " \n"}, "reason"),
        ("reviewed", {"approved_by": ""}, "x-mf-operator"),
    ],
)
def test_an_approval_missing_part_of_its_record_is_refused_naming_it(
    review: str, changes: dict[str, str], missing: str
) -> None:
    with pytest.raises(ServingError) as refused:
        decide_approval(None, approve(evidence(review), **changes), NOW)
    assert (refused.value.code, refused.value.param) == ("INVALID_INPUT", missing)


def test_an_approval_recorded_before_the_record_was_required_still_folds() -> None:
    (event,) = decide_approval(None, approve(evidence("reviewed")), NOW)
    old = msgspec.json.encode(event)
    raw = msgspec.json.decode(old)
    del raw["approved_by"], raw["reason"]
    decoded = msgspec.json.decode(msgspec.json.encode(raw), type=c.ProductionApproved)
    state = evolve_approval(None, decoded, 1)
    assert state is not None
    assert (state.status, state.approved_by, state.reason) == ("approved", "", "")
