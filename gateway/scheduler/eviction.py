"""Eviction choice: which idle residents to unload, and no more of them than needed.

Only a resident that is loaded, idle (no active leases) and not always-warm (pinned) may be
evicted; a lab request may evict only lab residents.  Candidates are taken cheapest first —
lab before production, then least recently used, then cheapest to reload — until the deficit is
covered; then every member whose removal still leaves enough is dropped again, so the final set
is minimal: without any one of its members the model would not fit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from gateway.scheduler.state import AcceleratorState, Channel, ResidencyState, Resident, is_standby

# Enum members read through their class cost ~0.2 µs each on Python 3.11 (module names: ~0.02 µs),
# and the loops below run per resident of every accelerator a decision looks at.
_LOADED = ResidencyState.LOADED
_LAB = Channel.LAB
_PRODUCTION = Channel.PRODUCTION


def busy_deployments(state: AcceleratorState) -> frozenset[str]:
    """Deployments holding at least one lease on this accelerator (a standby lease makes none
    busy: its holder lets it go once the resident is to be unloaded, `scheduler.standby`)."""
    return frozenset([lease.deployment_id for lease in state.leases if not is_standby(lease.lease_id)])


def evictable_when_idle(resident: Resident, requester: Channel) -> bool:
    """Loaded, not always-warm (pinned), and lab unless the requester is production."""
    return (
        resident.state is _LOADED
        and not resident.always_warm
        and (requester is _PRODUCTION or resident.channel is _LAB)
    )


def is_evictable(resident: Resident, busy: frozenset[str], requester: Channel) -> bool:
    """Evictable now: as above, and idle (no active leases, by count or by lease record)."""
    return (
        resident.active_leases == 0
        and resident.deployment_id not in busy
        and evictable_when_idle(resident, requester)
    )


# Channel values sort "lab" < "production", so the channel leads the key as is.
assert Channel.LAB < Channel.PRODUCTION


def eviction_order(resident: Resident) -> tuple[Channel, float, float, str]:
    """Sort key, cheapest eviction first: lab before production, least recently used, cheapest
    to reload; the deployment id breaks ties."""
    # Plain attribute reads: quicker than an ``attrgetter`` of four names on 3.11.
    return (resident.channel, resident.last_used_at, resident.reload_cost_ms, resident.deployment_id)


def eviction_candidates(
    state: AcceleratorState, requester: Channel, exclude: str = "", skip: tuple[Resident, ...] = ()
) -> list[Resident]:
    """Residents of ``state`` evictable right now, cheapest first (see ``eviction_order``).

    ``exclude`` (the deployment being placed) and the residents in ``skip`` are left out.
    """
    busy = busy_deployments(state) if state.leases else frozenset()
    production = requester is _PRODUCTION
    loaded = _LOADED
    lab = _LAB
    candidates = [
        item
        for item in state.residents
        if item.active_leases == 0
        and item.state is loaded
        and not item.always_warm
        and (production or item.channel is lab)
        and item.deployment_id != exclude
        and item.deployment_id not in busy
        and (not skip or item not in skip)
    ]
    candidates.sort(key=eviction_order)
    return candidates


def choose_evictions(
    candidates: Sequence[Resident], deficit: int, ordered: bool = False
) -> tuple[Resident, ...] | None:
    """The cheapest minimal set of ``candidates`` freeing at least ``deficit`` bytes.

    Candidates are taken in ``eviction_order`` (pass ``ordered=True`` if they already are) until
    the deficit is covered, then every member whose removal still leaves enough is dropped,
    most expensive first.  ``()`` when nothing needs evicting; ``None`` when all of them together
    are not enough.
    """
    if deficit <= 0:
        return ()
    chosen: list[Resident] = []
    freed = 0
    for resident in candidates if ordered else sorted(candidates, key=eviction_order):
        if resident.measured_bytes <= 0:
            continue
        chosen.append(resident)
        freed += resident.measured_bytes
        if freed >= deficit:
            break
    if freed < deficit:
        return None
    for index in range(len(chosen) - 1, -1, -1):
        size = chosen[index].measured_bytes
        if freed - size >= deficit:
            freed -= size
            del chosen[index]
    return tuple(chosen)


def eviction_cost(evicted: tuple[Resident, ...]) -> tuple[int, float, int]:
    """Cost of an eviction set, for comparing accelerators: production victims, reload ms, count."""
    production = 0
    reload_ms = 0.0
    for resident in evicted:
        production += resident.channel is _PRODUCTION
        reload_ms += resident.reload_cost_ms
    return (production, reload_ms, len(evicted))


def eviction_cost_floor(
    state: AcceleratorState,
    requester: Channel,
    exclude: str,
    forced: tuple[Resident, ...],
    deficit: int,
) -> tuple[tuple[int, float, int], int] | None:
    """A lower bound on ``(eviction_cost(forced + plan), headroom after)`` for the plan
    ``choose_evictions`` makes on ``state`` — without sorting or choosing, so placement can skip
    planning an accelerator that cannot beat the cheapest plan already found.

    The headroom after is ``freed - deficit``.  The bound holds component by component *given*
    that the components before it are equal, which is what makes it a lower bound of the tuple:

    - production victims: at least one more than ``forced`` has if lab residents alone cannot
      cover ``deficit``; else exactly as many (the cheapest-first walk takes lab first);
    - reload ms: ``forced`` plus the cheapest resident the plan can hold (lab ones when no
      production victim is taken);
    - count: ``forced`` plus one;
    - headroom: a one-victim plan frees at least its smallest possible victim.

    It scans a superset of the candidates (leases are not checked), which only lowers the bound:
    lab residents first, the others only when lab ones cannot cover ``deficit`` (usually they can).
    ``None`` (no bound: plan it) when nothing more needs evicting, or when a reload cost the bound
    rests on is negative or NaN, where sums are not monotonic.
    """
    if deficit <= 0:
        return None
    victims = 0
    reload_ms = 0.0
    for resident in forced:
        if not resident.reload_cost_ms >= 0.0:
            return None
        victims += resident.channel is _PRODUCTION
        reload_ms += resident.reload_cost_ms
    extremes = _idle_extremes(state, exclude, lab_only=True)
    if extremes is not None and extremes[0] < deficit:
        victims += 1
        if requester is _PRODUCTION:
            extremes = _idle_extremes(state, exclude, lab_only=False)
    if extremes is None or not extremes[1]:
        return None
    _, smallest, cheapest = extremes
    return (victims, reload_ms + cheapest, len(forced) + 1), smallest - deficit if smallest > deficit else 0


def _idle_extremes(state: AcceleratorState, exclude: str, lab_only: bool) -> tuple[int, int, float] | None:
    """Bytes together, the smallest size (0: none) and the cheapest reload of the residents an
    eviction plan on ``state`` could hold (lab ones only, if ``lab_only``): loaded, idle by count,
    not always-warm, not ``exclude``, of positive size.  ``None`` when one's reload
    cost is negative or NaN."""
    loaded = _LOADED
    lab = _LAB
    total = smallest = 0
    cheapest = math.inf
    for item in state.residents:
        if lab_only and item.channel is not lab:  # first: the lab-only pass passes over most
            continue
        if item.active_leases or item.always_warm or item.state is not loaded:
            continue
        size = item.measured_bytes
        if size <= 0 or item.deployment_id == exclude:
            continue
        cost = item.reload_cost_ms
        if not cost >= 0.0:
            return None
        total += size
        if cost < cheapest:
            cheapest = cost
        if not smallest or size < smallest:
            smallest = size
    return total, smallest, cheapest


def _cooldown_from(state: AcceleratorState) -> float | None:
    """The last eviction or finished load here: placement evicts nothing for a cooldown after either,
    so that no model is evicted right after it loaded (a swap every few hundred ms under contention)."""
    evicted, loaded = state.last_eviction_at, state.last_load_at
    if evicted is None or loaded is None:
        return evicted if loaded is None else loaded
    return evicted if evicted > loaded else loaded


def in_cooldown(state: AcceleratorState, cooldown_seconds: float, now: float) -> bool:
    since = _cooldown_from(state)
    return since is not None and now - since < cooldown_seconds


def cooldown_remaining_ms(state: AcceleratorState, cooldown_seconds: float, now: float) -> float:
    since = _cooldown_from(state)
    if since is None:
        return 0.0
    return max(0.0, (since + cooldown_seconds - now) * 1000.0)
