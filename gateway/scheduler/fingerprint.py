"""A stable fingerprint of everything a placement decision was computed from.

The inputs are put in canonical order (accelerators by id — their residents and leases are
already in id order, see ``AcceleratorState`` — and co-residency pairs with their members
sorted), encoded once with msgpack in deterministic mode, and hashed
with sha256.  Same inputs, same fingerprint — across processes and replays.

The policy, the envelope, the request and each accelerator go in as the tuple of all their
fields (``msgspec.structs.astuple``), not as maps: the same values without a field name each,
a quarter fewer bytes to encode and hash (~2.7 KB for 4 accelerators of 8 residents).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from operator import attrgetter

import msgspec

from gateway.scheduler.decision import CoResidencyPair, PlacementRequest
from gateway.scheduler.policy import SchedulerPolicy
from gateway.scheduler.state import AcceleratorState, ModelEnvelope

FINGERPRINT_VERSION = 12  # 12: policy with `lab_paused`; 11: residents with `worker_bytes`; 10: artifact locality (accelerators' cached sets, envelopes' set and bytes, policy's fetch rate); 9: envelopes with `hardware_class` and `spread`, accelerators with `hardware_model` and `runtimes`, requests with `new_replica`, policy with replica settings; 8: accelerators with `last_load_at`; 7: policy with `fairness_window_seconds`; 6: requests with `load_failed_on`; 5: envelopes with `outgrown`; 4: requests with `queued`; 3: residents without `pinned`, policy with its load and unload timeouts; 2: structs as arrays (1: maps)

by_accelerator_id = attrgetter("accelerator_id")
_encoder = msgspec.msgpack.Encoder(order="deterministic")
_fields = msgspec.structs.astuple


CanonicalPair = tuple[str, str, str]


def canonical_pair(pair: CoResidencyPair) -> CanonicalPair:
    # The status is a StrEnum: it sorts as, and msgpack encodes it as, its value — without the
    # ~0.4 µs ``.value`` read.
    left, right, status = pair.left, pair.right, pair.status
    return (left, right, status) if left <= right else (right, left, status)


def decision_fingerprint(
    accelerators: Sequence[AcceleratorState],
    envelope: ModelEnvelope,
    request: PlacementRequest,
    policy: SchedulerPolicy,
    now: float,
    co_residency: Sequence[CoResidencyPair] = (),
) -> str:
    """sha256 (hex) over the canonical encoding of a placement's inputs."""
    ordered = sorted(accelerators, key=by_accelerator_id)
    return ordered_fingerprint(
        ordered, envelope, request, policy, now, [canonical_pair(pair) for pair in co_residency]
    )


def ordered_fingerprint(
    ordered: list[AcceleratorState],
    envelope: ModelEnvelope,
    request: PlacementRequest,
    policy: SchedulerPolicy,
    now: float,
    pairs: list[CanonicalPair],
) -> str:
    """``decision_fingerprint`` for accelerators already in id order and pairs already in canonical
    form (placement does both once, for more than the fingerprint)."""
    payload = (
        FINGERPRINT_VERSION,
        _fields(policy),
        _fields(envelope),
        _fields(request),
        now,
        [_fields(state) for state in ordered],
        sorted(pairs),
    )
    return hashlib.sha256(_encoder.encode(payload)).hexdigest()
