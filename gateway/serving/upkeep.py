"""Residency upkeep: what the gateway must do without a request asking — pure decisions.

- always-warm deployments (and those asking for more than one copy) are loaded as soon as they
  are promoted, and again after a restart, up to their `replicas.min` copies (on distinct nodes
  where they fit), evicting idle residents that may be evicted when that is the only way they fit;
  further copies under queue pressure, and unloading idle ones, are `replicas`' decisions;
- an eviction whose victims have all stopped unloading is completed (`EvictionCompleted`,
  `gateway.state.evictions`);
- keep-warm residents are unloaded once idle for their TTL;
- residents of a deployment routing passes by because of its files (its artifact set quarantined,
  or holding other files than it was promoted with: `Catalog.unservable`) are unloaded once idle,
  whatever their residency policy, and an always-warm one is not loaded again while so;
- an accelerator whose books a measurement put over capacity (a load that measured more than it
  reserved) has idle residents unloaded until they fit again (`scheduler.overcommit`);
- a node whose worker is gone, while it holds something on the books, is declared lost and its
  accelerators reconciled to cold (`node_loss`);
- leases whose holder vanished (a gateway crashed mid-request) expire;
- an accelerator's pressure level changes on the books (`PressureChanged`) when its stabilised
  reading does: at once on the way up, after `pressure_stable_seconds` below on the way down.

Every replica runs the same upkeep; the accelerator's expected version makes duplicates harmless:
one replica's append lands, the others conflict and find it done in their next round.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import msgspec

from gateway.scheduler import (
    AcceleratorState,
    Pressure,
    PressureReading,
    ResidencyState,
    SchedulerPolicy,
    account,
    next_pressure,
)
from gateway.scheduler.overcommit import restore_capacity
from gateway.state.catalog import Catalog
from gateway.state.loads import LoadFailure, retry_at
from streams.events import serving as s


class Unload(msgspec.Struct, frozen=True):
    accelerator_id: str
    node_id: str
    deployment_id: str


class PressureTrack(msgspec.Struct, frozen=True):
    """This replica's hysteresis for one accelerator, and the level on the books it started from:
    when another replica changes that level, the track starts again from the new one."""

    booked: Pressure
    reading: PressureReading


class PressureStep(msgspec.Struct, frozen=True):
    accelerator_id: str
    previous: Pressure
    current: Pressure
    utilisation: float


def track_pressure(
    accelerators: Iterable[AcceleratorState],
    tracks: Mapping[str, PressureTrack],
    policy: SchedulerPolicy,
    now: float,
) -> tuple[dict[str, PressureTrack], list[PressureStep]]:
    """Each available accelerator's reading after observing its utilisation now, and the level
    changes to book. Accelerators without fresh telemetry are left out (their load is unknown)."""
    out: dict[str, PressureTrack] = {}
    steps = []
    for state in accelerators:
        if not state.available or state.total_bytes <= 0:
            continue
        booked = state.pressure.level
        track = tracks.get(state.accelerator_id)
        reading = track.reading if track is not None and track.booked is booked else state.pressure
        utilisation = account(state, policy, now).utilisation
        reading = next_pressure(reading, utilisation, now, policy)
        out[state.accelerator_id] = PressureTrack(booked, reading)
        if reading.level is not booked:
            steps.append(PressureStep(state.accelerator_id, booked, reading.level, utilisation))
    return out, steps


def with_tracked_pressure(
    accelerators: list[AcceleratorState], tracks: Mapping[str, PressureTrack]
) -> list[AcceleratorState]:
    """The accelerators with this replica's own reading in place of the booked one, where that
    reading follows the level on the books and a fall is under way. A booked reading starts afresh
    and cannot tell since when utilisation has been below it, so placement would refuse cold loads
    on a booked CRITICAL until the upkeep's next round books the fall; with the track it admits
    them the moment the stable period has passed (`scheduler.refuses_cold_loads`)."""
    out = accelerators
    for index, state in enumerate(accelerators):
        track = tracks.get(state.accelerator_id)
        if track is None or track.reading.below_since is None:
            continue
        booked = state.pressure.level
        if track.booked is booked and track.reading.level is booked:
            out = list(out) if out is accelerators else out  # copied once, only when a reading moves
            out[index] = msgspec.structs.replace(state, pressure=track.reading)
    return out


def next_pressure_due(tracks: Mapping[str, PressureTrack], policy: SchedulerPolicy) -> float | None:
    """When the next pending fall of a pressure level is due (None: none is pending)."""
    times = [
        t.reading.below_since + policy.pressure_stable_seconds
        for t in tracks.values()
        if t.reading.below_since is not None
    ]
    return min(times) if times else None


def hosted(accelerators: Iterable[AcceleratorState]) -> dict[str, int]:
    """Copies resident or on their way there, anywhere, by deployment id."""
    copies: dict[str, int] = {}
    for state in accelerators:
        for r in state.residents:
            if r.state in (ResidencyState.LOADED, ResidencyState.LOADING):
                copies[r.deployment_id] = copies.get(r.deployment_id, 0) + 1
    return copies


def warm_missing(
    catalog: Catalog,
    accelerators: Iterable[AcceleratorState],
    failures: Mapping[str, LoadFailure] | None = None,
    now: float = 0.0,
) -> list[str]:
    """Deployments with fewer copies than their resident floor (always-warm ones, and those asking
    for more than one copy), in id order; one whose last load failed (`failures`, by deployment
    id) is tried again `LOAD_RETRY_S` after that failure."""
    present = hosted(accelerators)
    failures = failures or {}
    return sorted(
        d.deployment_id
        for d in catalog.deployments.values()
        if d.resident_floor > present.get(d.deployment_id, 0)
        and d.active
        and not d.draining
        and catalog.unservable(d) is None
        and retry_at(failures.get(d.deployment_id)) <= now
    )


def next_warm_retry(catalog: Catalog, failures: Mapping[str, LoadFailure], now: float) -> float | None:
    """When an always-warm deployment whose load failed is next tried again (None: none waits;
    a retry already due is the current round's)."""
    return min(
        (
            retry_at(failure)
            for deployment_id, failure in failures.items()
            if retry_at(failure) > now
            and (d := catalog.deployments.get(deployment_id)) is not None
            and d.resident_floor > 0
        ),
        default=None,
    )


def idle_past_ttl(catalog: Catalog, accelerators: Iterable[AcceleratorState], now: float) -> list[Unload]:
    due = []
    for state in accelerators:
        for r in state.residents:
            info = catalog.deployments.get(r.deployment_id)
            if info is None or info.residency.kind != "keep_warm" or r.state is not ResidencyState.LOADED:
                continue
            if info.resident_floor > 0:  # its copies beyond the floor go by `replicas.idle_extras`
                continue
            if r.active_leases == 0 and r.last_used_at + info.residency.keep_warm_ttl_s <= now:
                due.append(Unload(state.accelerator_id, state.node_id, r.deployment_id))
    return due


def unservable_idle(catalog: Catalog, accelerators: Iterable[AcceleratorState]) -> list[Unload]:
    """Idle loaded residents of deployments whose files may not be served any more: routing sends
    them nothing, so their memory serves no one. No timer: the quarantine, and the end of the last
    lease of a busy one, each change the live view, which starts an upkeep round."""
    return [
        Unload(state.accelerator_id, state.node_id, r.deployment_id)
        for state in accelerators
        for r in state.residents
        if r.state is ResidencyState.LOADED
        and r.active_leases == 0
        and (info := catalog.deployments.get(r.deployment_id)) is not None
        and catalog.unservable(info) is not None
    ]


def over_capacity(accelerators: Iterable[AcceleratorState], policy: SchedulerPolicy) -> list[Unload]:
    """Idle residents to unload where the books are over capacity, cheapest first. No timer: the
    measurement that put them over, and each lease that ends, change the live view."""
    return [
        Unload(state.accelerator_id, state.node_id, r.deployment_id)
        for state in accelerators
        for r in restore_capacity(state, policy)
    ]


def next_ttl_due(catalog: Catalog, accelerators: Iterable[AcceleratorState]) -> float | None:
    """When the next idle keep-warm resident reaches its TTL (None: none is waiting)."""
    times = [
        r.last_used_at + info.residency.keep_warm_ttl_s
        for state in accelerators
        for r in state.residents
        if (info := catalog.deployments.get(r.deployment_id)) is not None
        and info.residency.kind == "keep_warm"
        and info.resident_floor == 0
        and r.state is ResidencyState.LOADED
        and r.active_leases == 0
    ]
    return min(times) if times else None


def expired(
    accelerators: Mapping[str, AcceleratorState], grants: Mapping[str, s.LeaseGranted], now: float
) -> list[s.LeaseGranted]:
    """Grants of leases still on the books past their expiry, in lease id order."""
    out = []
    for lease_id, grant in sorted(grants.items()):
        state = accelerators.get(grant.accelerator_id)
        on_books = state is not None and any(x.lease_id == lease_id for x in state.leases)
        if on_books and grant.expires_at.timestamp() <= now:
            out.append(grant)
    return out


def next_lease_expiry(grants: Mapping[str, s.LeaseGranted]) -> float | None:
    """When the next held lease expires (None: none is held)."""
    return min((g.expires_at.timestamp() for g in grants.values()), default=None)
