"""The pure scheduler core: VRAM accounting, pressure, eviction and placement decisions.

No I/O and no clocks: callers pass state, policy and ``now`` (POSIX seconds) in, and get
immutable values back.  The accelerator aggregate and the gateway turn decisions into events.
"""

from gateway.scheduler.accounting import (
    Attribution,
    Budget,
    account,
    cold_load_margin,
    required_bytes,
    safety_reserve,
    telemetry_fresh,
)
from gateway.scheduler.decision import (
    CoResidencyPair,
    CoResidencyStatus,
    PlacementDecision,
    PlacementRequest,
    ReasonCode,
    Verdict,
)
from gateway.scheduler.eviction import choose_evictions, evictable_when_idle, eviction_order, is_evictable
from gateway.scheduler.fingerprint import decision_fingerprint
from gateway.scheduler.placement import plan_placement
from gateway.scheduler.policy import DEFAULT_POLICY, GIB, MIB, SchedulerPolicy
from gateway.scheduler.pressure import level_for, next_pressure, refuses_cold_loads
from gateway.scheduler.state import (
    AcceleratorState,
    Channel,
    Lease,
    ModelEnvelope,
    Pressure,
    PressureReading,
    ResidencyState,
    Resident,
)

__all__ = [
    "DEFAULT_POLICY",
    "GIB",
    "MIB",
    "AcceleratorState",
    "Attribution",
    "Budget",
    "Channel",
    "CoResidencyPair",
    "CoResidencyStatus",
    "Lease",
    "ModelEnvelope",
    "PlacementDecision",
    "PlacementRequest",
    "Pressure",
    "PressureReading",
    "ReasonCode",
    "ResidencyState",
    "Resident",
    "SchedulerPolicy",
    "Verdict",
    "account",
    "choose_evictions",
    "cold_load_margin",
    "decision_fingerprint",
    "evictable_when_idle",
    "eviction_order",
    "is_evictable",
    "level_for",
    "next_pressure",
    "plan_placement",
    "refuses_cold_loads",
    "required_bytes",
    "safety_reserve",
    "telemetry_fresh",
]
