"""The books over capacity after a measurement, and what to unload to bring them back.

Placement never admits past capacity: a lease or load is granted only within schedulable bytes.
A measured outcome can still break the invariant ``resident + leased <= total - reserve``: a
cold load reserves its envelope, and `ResidencyLoaded` replaces that reservation with what the
agent measured, which may be more. From then on nothing fits (schedulable is negative), so
nothing is granted there; `restore_capacity` names the idle residents whose unload brings the
books back within capacity, cheapest first, the newcomer included (it was just used, so it goes
last among equals).
"""

from __future__ import annotations

from gateway.scheduler.accounting import safety_reserve
from gateway.scheduler.eviction import choose_evictions, eviction_candidates
from gateway.scheduler.policy import SchedulerPolicy
from gateway.scheduler.state import AcceleratorState, Channel, Resident


def booked_bytes(state: AcceleratorState) -> int:
    """Resident bytes plus every lease's reservation: what the books hold on the accelerator."""
    held = 0
    for resident in state.residents:
        held += resident.measured_bytes
    for lease in state.leases:
        held += lease.reserved_bytes
    return held


def excess_bytes(state: AcceleratorState, policy: SchedulerPolicy) -> int:
    """How far the books are over ``total - reserve`` (0: within capacity)."""
    over = booked_bytes(state) - (state.total_bytes - safety_reserve(state.total_bytes, policy))
    return over if over > 0 else 0


def restore_capacity(state: AcceleratorState, policy: SchedulerPolicy) -> tuple[Resident, ...]:
    """The idle, unpinned residents to unload so that the books fit again: the cheapest minimal
    set, or every such resident when together they are not enough (leases ending do the rest).
    Empty when the books fit, or nothing may be unloaded now (busy or always-warm residents)."""
    excess = excess_bytes(state, policy)
    if excess == 0:
        return ()
    candidates = eviction_candidates(state, Channel.PRODUCTION)
    chosen = choose_evictions(candidates, excess, ordered=True)
    return tuple(candidates) if chosen is None else chosen
