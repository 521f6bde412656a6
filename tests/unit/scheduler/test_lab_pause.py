"""The policy's `lab_paused`: lab-channel work is refused LAB_PAUSED; production work is not."""

from __future__ import annotations

import msgspec
from sched_builders import NOW, POLICY, ask, gpu, model

from gateway.scheduler import Channel, Verdict, plan_placement
from gateway.scheduler import ReasonCode as R
from gateway.scheduler.policy import policy_of, revise
from gateway.serving.errors import rejection

PAUSED = msgspec.structs.replace(POLICY, lab_paused=True)
ROOMY = (gpu(total_gib=80),)


def test_lab_work_is_refused_lab_paused_while_the_policy_pauses_it() -> None:
    decision = plan_placement(ROOMY, model(channel=Channel.LAB), ask(channel=Channel.LAB), PAUSED, NOW)

    assert decision.verdict is Verdict.REJECT_LAB_PAUSED
    assert decision.reason_codes == (R.LAB_PAUSED,)
    assert decision.accelerator_id is None


def test_production_work_is_placed_while_lab_work_is_paused() -> None:
    decision = plan_placement(ROOMY, model(), ask(), PAUSED, NOW)

    assert decision.verdict is Verdict.ADMIT


def test_lab_work_is_placed_when_the_policy_does_not_pause_it() -> None:
    decision = plan_placement(ROOMY, model(channel=Channel.LAB), ask(channel=Channel.LAB), POLICY, NOW)

    assert decision.verdict is Verdict.ADMIT


def test_a_lab_paused_refusal_reaches_the_client_as_the_reference_code_503() -> None:
    decision = plan_placement(ROOMY, model(channel=Channel.LAB), ask(channel=Channel.LAB), PAUSED, NOW)

    error = rejection(decision, "new-model")

    assert (error.code, error.http_status) == ("LAB_PAUSED", 503)


def test_a_policy_revision_pauses_and_resumes_lab_work() -> None:
    paused = revise({}, {"lab_paused": True})
    resumed = revise(paused, {"lab_paused": False})

    assert policy_of(paused, 1).lab_paused is True
    assert policy_of(resumed, 2).lab_paused is False
