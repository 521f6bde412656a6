"""The standby gauges: what each of this gateway's standby leases books, and its slots taken."""

from __future__ import annotations

from gateway.scheduler.standby import Held, StandbySlots
from gateway.serving.gauges import standby_gauges


def held(lease_id: str, deployment_id: str, reserved_bytes: int) -> Held:
    return Held(
        lease_id=lease_id,
        accelerator_id="node-a-gpu0",
        node_id="node-a",
        deployment_id=deployment_id,
        reserved_bytes=reserved_bytes,
        expires_at=0.0,
    )


def samples(slots: StandbySlots | None) -> dict[str, dict[str, float]]:
    return {
        family.name: {sample.labels["deployment"]: sample.value for sample in family.samples}
        for family in standby_gauges(slots)
    }


def test_a_gateway_without_standby_leases_has_no_standby_gauges() -> None:
    assert standby_gauges(None) == []


def test_each_standby_lease_shows_its_bytes_its_slots_and_those_taken() -> None:
    slots = StandbySlots(3)
    slots.hold(held("standby-a", "dep-a", 3_000))
    slots.hold(held("standby-b", "dep-b", 6_000))
    assert slots.take("dep-a") is not None
    assert slots.take("dep-a") is not None
    assert samples(slots) == {
        "modelforge_standby_lease_bytes": {"dep-a": 3_000, "dep-b": 6_000},
        "modelforge_standby_slots": {"dep-a": 3, "dep-b": 3},
        "modelforge_standby_slots_in_use": {"dep-a": 2, "dep-b": 0},
    }


def test_a_slot_given_back_is_no_longer_in_use() -> None:
    slots = StandbySlots(2)
    slots.hold(held("standby-a", "dep-a", 2_000))
    taken = slots.take("dep-a")
    assert taken is not None
    slots.give_back(taken.lease_id)
    assert samples(slots)["modelforge_standby_slots_in_use"] == {"dep-a": 0}
