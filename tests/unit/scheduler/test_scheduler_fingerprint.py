"""Decision fingerprints: a stable sha256 over the canonical form of a placement's inputs."""

from __future__ import annotations

import enum

import msgspec
from sched_builders import NOW, POLICY, ask, gpu, lease, model, resident

from gateway.scheduler import (
    AcceleratorState,
    CoResidencyPair,
    CoResidencyStatus,
    Pressure,
    PressureReading,
    decision_fingerprint,
    plan_placement,
)

FLEET = (
    gpu(
        "gpu-0",
        residents=(resident("a", 4), resident("b", 6)),
        leases=(lease("l1", "a", 1), lease("l2", "b", 1)),
    ),
    gpu("gpu-1", residents=(resident("c", 8),)),
)
PAIR = CoResidencyPair(left="new-model", right="c", status=CoResidencyStatus.PROVEN_SAFE)


def fingerprint(fleet: tuple[AcceleratorState, ...] = FLEET, **changes: object) -> str:
    inputs: dict[str, object] = {
        "accelerators": fleet,
        "envelope": model(),
        "request": ask(),
        "policy": POLICY,
        "now": NOW,
        "co_residency": (PAIR,),
    }
    inputs.update(changes)
    return decision_fingerprint(**inputs)  # type: ignore[arg-type]


def test_the_fingerprint_is_a_stable_known_value() -> None:
    # Changing the canonical encoding changes every stored fingerprint: bump FINGERPRINT_VERSION.
    assert fingerprint() == "512dc4faa1cca88df7d9659568d62adc48bb9732daf33a3a5c038e86a2b65d78"


def test_order_of_accelerators_residents_and_leases_does_not_matter() -> None:
    shuffled = (
        FLEET[1],
        msgspec.structs.replace(
            FLEET[0], residents=tuple(reversed(FLEET[0].residents)), leases=tuple(reversed(FLEET[0].leases))
        ),
    )
    assert fingerprint(shuffled) == fingerprint()


def test_orientation_of_a_co_residency_pair_does_not_matter() -> None:
    flipped = CoResidencyPair(left=PAIR.right, right=PAIR.left, status=PAIR.status)
    assert fingerprint(co_residency=(flipped,)) == fingerprint()


def test_every_input_is_covered() -> None:
    baseline = fingerprint()
    changed = [
        fingerprint(now=NOW + 1),
        fingerprint(policy=msgspec.structs.replace(POLICY, revision=2)),
        fingerprint(envelope=model(cold_load_ms=2001.0)),
        fingerprint(request=ask(queue_depth=1)),
        fingerprint(co_residency=()),
        fingerprint((msgspec.structs.replace(FLEET[0], observed_used_bytes=1), FLEET[1])),
    ]
    assert baseline not in changed
    assert len(set(changed)) == len(changed)


def other(value: object) -> object:
    """A different value of the same kind (None: a number, as optional fields here are numbers)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, enum.Enum):
        return next(member for member in type(value) if member is not value)
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        return value + "-other"
    if isinstance(value, tuple):
        return (*value, "other")
    assert value is None
    return 1.0


def changed_fields(item: msgspec.Struct) -> list[msgspec.Struct]:
    """``item`` with each of its fields changed in turn."""
    return [
        msgspec.structs.replace(item, **{name: other(getattr(item, name))}) for name in item.__struct_fields__
    ]


def test_every_field_of_every_input_is_covered() -> None:
    state = FLEET[0]
    states = {
        "accelerator_id": "gpu-9",
        "node_id": "node-9",
        "total_bytes": state.total_bytes + 1,
        "observed_used_bytes": None,
        "observed_at": NOW,
        "residents": (*state.residents, resident("c", 1)),
        "leases": state.leases[:1],
        "pressure": PressureReading(level=Pressure.HIGH),
        "last_eviction_at": NOW,
        "last_load_at": NOW,
        "available": False,
        "hardware_model": "gpu:L4",
        "runtimes": ("tensorrt",),
        "cached_sets": ("as-other",),
    }
    assert set(states) == set(AcceleratorState.__struct_fields__)
    variants = [
        *[fingerprint(policy=item) for item in changed_fields(POLICY)],
        *[fingerprint(envelope=item) for item in changed_fields(model())],
        *[fingerprint(request=item) for item in changed_fields(ask())],
        *[
            fingerprint((msgspec.structs.replace(state, **{name: value}), FLEET[1]))
            for name, value in states.items()
        ],
    ]
    assert fingerprint() not in variants
    assert len(set(variants)) == len(variants)


def test_the_decision_carries_the_fingerprint_of_its_relevant_inputs() -> None:
    unrelated = CoResidencyPair(left="x", right="y", status=CoResidencyStatus.PROVEN_UNSAFE)
    decision = plan_placement(FLEET, model(), ask(), POLICY, NOW, (PAIR, unrelated))
    assert decision.fingerprint == fingerprint()
