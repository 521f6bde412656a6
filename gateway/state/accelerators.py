"""The accelerator aggregate's fold: events -> the scheduler's `AcceleratorState`.

Pure. A cold load reserves its required bytes as a lease named by its load id until the agent
reports what it measured; a resident's scheduling attributes (always-warm, channel, reload cost)
come from its deployment in the catalogue.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

import msgspec

from gateway.scheduler import (
    AcceleratorState,
    Channel,
    Lease,
    Pressure,
    PressureReading,
    ResidencyState,
    Resident,
)
from gateway.scheduler.state import is_standby
from gateway.state.catalog import Catalog
from streams.events import serving as s
from streams.events.base import Event


def new_accelerator(accelerator_id: str, node_id: str, total_bytes: int) -> AcceleratorState:
    return AcceleratorState(accelerator_id=accelerator_id, node_id=node_id, total_bytes=total_bytes)


def _resident_for(
    deployment_id: str, catalog: Catalog, measured: int, state: ResidencyState, at: float
) -> Resident:
    info = catalog.deployments.get(deployment_id)
    return Resident(
        deployment_id=deployment_id,
        measured_bytes=measured,
        state=state,
        always_warm=bool(info and info.residency.kind == "always_warm"),
        channel=Channel.PRODUCTION if info is None or info.channel == "stable" else Channel.LAB,
        last_used_at=at,
        reload_cost_ms=info.envelope.cold_load_ms if info else 0.0,
    )


def with_deployment_facts(state: AcceleratorState, deployment_id: str, catalog: Catalog) -> AcceleratorState:
    """The deployment's resident here, if any, with what the catalogue now says of it (residency
    policy, channel, reload cost); what was measured and when it was used stay."""
    current = _find(state, deployment_id)
    if current is None:
        return state
    fresh = _resident_for(deployment_id, catalog, current.measured_bytes, current.state, current.last_used_at)
    facts = {
        "always_warm": fresh.always_warm,
        "channel": fresh.channel,
        "reload_cost_ms": fresh.reload_cost_ms,
    }
    return _replace_resident(state, deployment_id, msgspec.structs.replace(current, **facts))


def _replace_resident(
    state: AcceleratorState, deployment_id: str, resident: Resident | None
) -> AcceleratorState:
    others = tuple(r for r in state.residents if r.deployment_id != deployment_id)
    residents = others if resident is None else (*others, resident)
    return msgspec.structs.replace(state, residents=residents) if residents != state.residents else state


def _find(state: AcceleratorState, deployment_id: str) -> Resident | None:
    return next((r for r in state.residents if r.deployment_id == deployment_id), None)


def _without_lease(state: AcceleratorState, lease_id: str) -> tuple[AcceleratorState, Lease | None]:
    lease = next((item for item in state.leases if item.lease_id == lease_id), None)
    if lease is None:
        return state, None
    leases = tuple(item for item in state.leases if item.lease_id != lease_id)
    return msgspec.structs.replace(state, leases=leases), lease


def _lease_count(state: AcceleratorState, deployment_id: str, delta: int, at: float) -> AcceleratorState:
    resident = _find(state, deployment_id)
    if resident is None:
        return state
    used = msgspec.structs.replace(
        resident,
        active_leases=max(0, resident.active_leases + delta),
        last_used_at=max(resident.last_used_at, at),
    )
    return _replace_resident(state, deployment_id, used)


def evolve_accelerator(
    state: AcceleratorState, event: Event, at: datetime, catalog: Catalog
) -> AcceleratorState:
    """Apply one accelerator event that occurred at `at`."""
    when = at.timestamp()
    match event:
        case s.LeaseGranted():
            lease = Lease(
                lease_id=event.lease_id,
                deployment_id=event.deployment_id,
                reserved_bytes=event.reserved_bytes,
            )
            state = msgspec.structs.replace(state, leases=(*state.leases, lease))
            if is_standby(event.lease_id):  # booked room, not a use: its resident stays idle
                if event.used_at is None:
                    return state
                return _lease_count(state, event.deployment_id, 0, event.used_at.timestamp())
            return _lease_count(state, event.deployment_id, +1, when)
        case s.LeaseReleased() | s.LeaseExpired():
            state, gone = _without_lease(state, event.lease_id)
            if gone is None or is_standby(gone.lease_id):
                return state
            return _lease_count(state, gone.deployment_id, -1, when)
        case s.ResidencyLoadRequested():
            loading = _resident_for(event.deployment_id, catalog, 0, ResidencyState.LOADING, when)
            reservation = Lease(
                lease_id=event.load_id, deployment_id=event.deployment_id, reserved_bytes=event.required_bytes
            )
            state = msgspec.structs.replace(state, leases=(*state.leases, reservation))
            return _replace_resident(state, event.deployment_id, loading)
        case s.ResidencyLoaded():
            state, _ = _without_lease(state, event.load_id)
            loaded = _resident_for(
                event.deployment_id, catalog, event.measured_bytes, ResidencyState.LOADED, when
            )
            previous = _find(state, event.deployment_id)
            if previous is not None:
                loaded = msgspec.structs.replace(loaded, active_leases=previous.active_leases)
            state = msgspec.structs.replace(state, last_load_at=when)
            return _replace_resident(state, event.deployment_id, loaded)
        case s.ResidencyLoadFailed():
            state, _ = _without_lease(state, event.load_id)
            return _replace_resident(state, event.deployment_id, None)
        case s.ResidencyUnloading():
            current = _find(state, event.deployment_id)
            if current is None:
                return state
            return _replace_resident(
                state, event.deployment_id, msgspec.structs.replace(current, state=ResidencyState.UNLOADING)
            )
        case s.ResidencyUnloaded():
            return _replace_resident(_freed(state, event.reclaimed_bytes, when), event.deployment_id, None)
        case s.ResidencyUnloadFailed():
            current = _find(state, event.deployment_id)
            if current is None:
                return state
            if not event.still_resident:  # gone from the agent; telemetry keeps what it did not free
                return _replace_resident(state, event.deployment_id, None)
            # Not unloaded: it is still resident as far as the books go.
            return _replace_resident(
                state, event.deployment_id, msgspec.structs.replace(current, state=ResidencyState.LOADED)
            )
        case s.ResidencyReconciled():
            held = set(event.held)
            kept = tuple(r for r in state.residents if r.deployment_id in held)
            leases = tuple(item for item in state.leases if item.deployment_id in held)
            return msgspec.structs.replace(state, residents=kept, leases=leases)
        case s.EvictionPlanned():
            # Victims stop taking new work at once: nothing may lease a model being unloaded.
            victims = set(event.victims)
            residents = tuple(
                msgspec.structs.replace(r, state=ResidencyState.UNLOADING)
                if r.deployment_id in victims
                else r
                for r in state.residents
            )
            # The eviction cooldown spaces placement's own evictions (making room for a model), so
            # that it cannot thrash models in and out; an operator's unload or drain and the upkeep's
            # unloads (keep-warm TTL, unservable files) make room for nobody and do not start it.
            made_room = event.reason == "eviction"
            since = when if made_room else state.last_eviction_at
            return msgspec.structs.replace(state, residents=residents, last_eviction_at=since)
        case s.PressureChanged():
            reading = PressureReading(level=Pressure(event.current), since=when)
            return msgspec.structs.replace(state, pressure=reading)
        case _:
            return state


def _freed(state: AcceleratorState, reclaimed: int, when: float) -> AcceleratorState:
    """A sample taken before an unload (the agent stamps both on its clock) still shows the memory
    the unloaded worker gave back: take that off it, or until the next sample the memory counts as
    someone else's and the model swapped in next does not fit (requests were refused meanwhile)."""
    observed, observed_at = state.observed_used_bytes, state.observed_at
    if observed is None or observed_at is None or observed_at >= when or reclaimed <= 0:
        return state
    return msgspec.structs.replace(state, observed_used_bytes=max(0, observed - reclaimed))


def with_telemetry(
    state: AcceleratorState,
    used_bytes: int,
    observed_at: float,
    cached_sets: tuple[str, ...] = (),
    workers: Mapping[str, int] | None = None,
) -> AcceleratorState:
    """The sample's memory on the books; `workers` (by deployment id): what each resident's worker
    holds now, where the agent could tell (a resident it does not name keeps 0: not told)."""
    residents = state.residents
    if workers is not None and any(r.worker_bytes != workers.get(r.deployment_id, 0) for r in residents):
        residents = tuple(
            msgspec.structs.replace(r, worker_bytes=workers.get(r.deployment_id, 0)) for r in residents
        )
    return msgspec.structs.replace(
        state,
        observed_used_bytes=used_bytes,
        observed_at=observed_at,
        cached_sets=cached_sets,
        residents=residents,
    )
