"""Which accelerator placement picks across a fleet: spread or pack, the least-loaded copy, and a
hardware class nothing was measured on."""

from __future__ import annotations

from sched_builders import NOW, POLICY, ask, gpu, model, resident

from gateway.scheduler import AcceleratorState, ReasonCode, Verdict, plan_placement
from gateway.scheduler.state import HardwareClass

H100 = HardwareClass("gpu:H100", "tensorrt", "fp16")


def roomy_and_tight() -> tuple[AcceleratorState, ...]:
    return (gpu("gpu-0", total_gib=80), gpu("gpu-1", total_gib=24))


def test_binpack_cold_loads_onto_the_tightest_fit() -> None:
    decision = plan_placement(roomy_and_tight(), model(), ask(), POLICY, NOW)
    assert decision.accelerator_id == "gpu-1"


def test_spread_cold_loads_onto_the_most_free_memory() -> None:
    decision = plan_placement(roomy_and_tight(), model(spread=True), ask(), POLICY, NOW)
    assert decision.accelerator_id == "gpu-0"


def test_a_request_goes_to_the_copy_serving_the_fewest_requests() -> None:
    fleet = (
        gpu("gpu-0", residents=(resident("new-model", 10, active_leases=3),)),
        gpu("gpu-1", total_gib=40, residents=(resident("new-model", 10, active_leases=1),)),
    )
    assert plan_placement(fleet, model(), ask(), POLICY, NOW).accelerator_id == "gpu-1"


def test_a_further_copy_goes_to_another_node_even_when_packing() -> None:
    fleet = (
        gpu("gpu-0", node_id="a", residents=(resident("new-model", 10),)),
        gpu("gpu-1", node_id="a", total_gib=24),
        gpu("gpu-2", node_id="b"),
    )
    decision = plan_placement(fleet, model(), ask(new_replica=True), POLICY, NOW)
    assert (decision.verdict, decision.accelerator_id) == (Verdict.ADMIT, "gpu-2")


def test_a_further_copy_reserves_its_whole_load_and_no_request_floor() -> None:
    # The load job carries `load_bytes`: were it 0, the measured load would mark the envelope
    # outgrown and every cold load after it SCHEDULER_STATE_STALE.
    envelope = model()
    decision = plan_placement((gpu("gpu-0"),), envelope, ask(new_replica=True), POLICY, NOW)
    assert decision.verdict is Verdict.ADMIT
    assert decision.load_bytes == decision.required_bytes >= envelope.required_bytes > 0


def test_an_envelope_is_not_reused_on_another_accelerator_model() -> None:
    fleet = (gpu("gpu-0", hardware_model="gpu:L4", runtimes=("tensorrt",)),)
    decision = plan_placement(fleet, model(hardware_class=H100), ask(), POLICY, NOW)
    assert decision.verdict is Verdict.REJECT_NO_ELIGIBLE_ACCELERATOR
    assert decision.reason_codes == (ReasonCode.ENVELOPE_CLASS_UNMEASURED,)


def test_an_envelope_is_not_reused_on_a_node_without_its_runtime() -> None:
    fleet = (gpu("gpu-0", hardware_model="gpu:H100", runtimes=("onnxruntime-gpu",)),)
    decision = plan_placement(fleet, model(hardware_class=H100), ask(), POLICY, NOW)
    assert decision.reason_codes == (ReasonCode.ENVELOPE_CLASS_UNMEASURED,)


def test_placement_picks_the_measured_class_where_the_fleet_is_mixed() -> None:
    fleet = (
        gpu("gpu-0", hardware_model="gpu:L4", runtimes=("tensorrt",)),
        gpu("gpu-1", hardware_model="gpu:H100", runtimes=("tensorrt",)),
    )
    decision = plan_placement(fleet, model(hardware_class=H100), ask(), POLICY, NOW)
    assert (decision.verdict, decision.accelerator_id) == (Verdict.ADMIT, "gpu-1")
