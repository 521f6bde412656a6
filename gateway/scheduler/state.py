"""Immutable scheduler state: what one accelerator holds, and what one model needs.

Times are POSIX seconds (``float``); sizes are bytes (``int``).  The state is built by the
accelerator aggregate's ``evolve`` (and the projection), never mutated: every change is a new
value.  ``AcceleratorState`` puts its residents and leases in id order when it is built, so a
decision never has to.
"""

from __future__ import annotations

import enum

import msgspec


class Channel(enum.StrEnum):
    """Where a deployment (or a request's client) runs: lab work yields to production."""

    LAB = "lab"
    PRODUCTION = "production"


class ResidencyState(enum.StrEnum):
    LOADING = "loading"
    LOADED = "loaded"
    UNLOADING = "unloading"


class Pressure(enum.StrEnum):
    NORMAL = "NORMAL"
    ELEVATED = "ELEVATED"
    HIGH = "HIGH"
    CRITICAL = "CRITICAL"


SEVERITY: dict[Pressure, int] = {
    Pressure.NORMAL: 0,
    Pressure.ELEVATED: 1,
    Pressure.HIGH: 2,
    Pressure.CRITICAL: 3,
}


class PressureReading(msgspec.Struct, frozen=True, kw_only=True):
    """A stabilised pressure level plus what hysteresis needs to let it fall.

    ``below_since`` is when utilisation first dropped under ``level`` without climbing back;
    ``below_peak`` is the highest level seen since then (the level pressure falls to).
    """

    level: Pressure = Pressure.NORMAL
    since: float = 0.0
    below_since: float | None = None
    below_peak: Pressure | None = None


class Resident(msgspec.Struct, frozen=True, kw_only=True, array_like=True):
    """One deployment's residency on an accelerator, with its measured footprint.

    Encoded as an array (field order is part of the format: append new fields, with defaults,
    at the end): an accelerator view holds many residents and every decision fingerprints them.
    """

    deployment_id: str
    measured_bytes: int
    state: ResidencyState = ResidencyState.LOADED
    active_leases: int = 0
    always_warm: bool = False  # the pin: never evicted (the reference's pinned = always-warm)
    channel: Channel = Channel.PRODUCTION
    last_used_at: float = 0.0
    reload_cost_ms: float = 0.0
    # What its worker process holds now, from the node's telemetry (0: not told): the books count
    # the resident at the larger of this and `measured_bytes` while that telemetry is fresh.
    worker_bytes: int = 0


class Lease(msgspec.Struct, frozen=True, kw_only=True, array_like=True):
    """VRAM granted to one in-flight request or load; ``materialised`` is already in use.

    Encoded as an array, like ``Resident``.
    """

    lease_id: str
    deployment_id: str
    reserved_bytes: int
    materialised_bytes: int = 0


STANDBY_PREFIX = "standby-"  # a replica's standby lease (`gateway.scheduler.standby`)


def is_standby(lease_id: str) -> bool:
    """Whether the lease is a replica's standby lease (not a request's or a load's)."""
    return lease_id.startswith(STANDBY_PREFIX)


def _resident_key(item: Resident) -> str:
    return item.deployment_id


def _lease_key(item: Lease) -> str:
    return item.lease_id


class AcceleratorState(msgspec.Struct, frozen=True, kw_only=True):
    """One accelerator as the scheduler sees it.  Residents and leases are kept in id order."""

    accelerator_id: str
    node_id: str
    total_bytes: int
    observed_used_bytes: int | None = None
    observed_at: float | None = None
    residents: tuple[Resident, ...] = ()
    leases: tuple[Lease, ...] = ()
    pressure: PressureReading = PressureReading()
    last_eviction_at: float | None = None
    # When a model last finished loading here: it is not evicted for a cooldown after that either.
    last_load_at: float | None = None
    # False while the node is offline, disabled or draining: nothing new is placed here.
    available: bool = True
    # Its hardware class's accelerator part (``fleet.accelerator_model``) and its node's runtimes:
    # an envelope measured elsewhere is not reused here.  "" / (): not known.
    hardware_model: str = ""
    runtimes: tuple[str, ...] = ()
    # The artifact sets the node holds (its telemetry says), sorted: a cold load there fetches none.
    cached_sets: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # Canonical order, fixed once at construction (and decoding) rather than per decision:
        # residents by deployment id, leases by lease id.  This is what makes fingerprints stable.
        residents = [item.deployment_id for item in self.residents]
        if residents != sorted(residents):
            msgspec.structs.force_setattr(self, "residents", tuple(sorted(self.residents, key=_resident_key)))
        leases = [item.lease_id for item in self.leases]
        if leases != sorted(leases):
            msgspec.structs.force_setattr(self, "leases", tuple(sorted(self.leases, key=_lease_key)))


class HardwareClass(msgspec.Struct, frozen=True, array_like=True):
    """What an envelope was measured on: accelerator model, runtime and precision.  A measurement
    holds on accelerators of its model whose node has its runtime; nowhere else."""

    accelerator_model: str
    runtime: str
    precision: str = ""


class ModelEnvelope(msgspec.Struct, frozen=True, kw_only=True):
    """A deployment's measured resource envelope (from its runtime probe)."""

    deployment_id: str
    required_bytes: int
    peak_bytes: int
    request_floor_bytes: int = 0
    channel: Channel = Channel.PRODUCTION
    cold_load_ms: float = 0.0
    # Set when a fact behind the measurement changed (engine, runtime, hardware): re-probe first.
    stale: bool = False
    # Set when a load measured more than the envelope reserved: no cold load goes by it (a loaded
    # copy, measured as it is, serves on) until a new probe is promoted.
    outgrown: bool = False
    # The class it was measured on (None: not known, an envelope from before classes were kept).
    hardware_class: HardwareClass | None = None
    # Where new copies go: the tightest fit (binpack), or the most free memory (spread).
    spread: bool = False
    # The files a cold load needs: on a node that lacks them, they are fetched first.
    artifact_set_id: str = ""
    artifact_bytes: int = 0


def find_resident(state: AcceleratorState, deployment_id: str) -> Resident | None:
    for resident in state.residents:
        if resident.deployment_id == deployment_id:
            return resident
    return None
