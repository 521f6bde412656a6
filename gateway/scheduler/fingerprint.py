"""A stable fingerprint of everything a placement decision was computed from.

The inputs are put in canonical order (accelerators by id — their residents and leases are
already in id order, see ``AcceleratorState`` — and co-residency pairs with their members
sorted), encoded once with msgpack in deterministic mode, and hashed
with sha256.  Same inputs, same fingerprint — across processes and replays.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import msgspec

from gateway.scheduler.decision import CoResidencyPair, PlacementRequest
from gateway.scheduler.policy import SchedulerPolicy
from gateway.scheduler.state import AcceleratorState, ModelEnvelope

FINGERPRINT_VERSION = 1

_encoder = msgspec.msgpack.Encoder(order="deterministic")


def canonical_pair(pair: CoResidencyPair) -> tuple[str, str, str]:
    left, right = pair.left, pair.right
    return (left, right, pair.status.value) if left <= right else (right, left, pair.status.value)


def decision_fingerprint(
    accelerators: Sequence[AcceleratorState],
    envelope: ModelEnvelope,
    request: PlacementRequest,
    policy: SchedulerPolicy,
    now: float,
    co_residency: Sequence[CoResidencyPair] = (),
) -> str:
    """sha256 (hex) over the canonical encoding of a placement's inputs."""
    ordered = sorted(accelerators, key=lambda item: item.accelerator_id)
    payload = (
        FINGERPRINT_VERSION,
        policy,
        envelope,
        request,
        now,
        ordered,
        sorted([canonical_pair(pair) for pair in co_residency]) if co_residency else [],
    )
    return hashlib.sha256(_encoder.encode(payload)).hexdigest()
