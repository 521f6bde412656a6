"""Screening one accelerator for one placement: does the request fit there as is, never, or
after evictions (and which: the cheapest minimal set), or once leases, loads and cooldowns end.
`placement.plan_placement` screens every eligible accelerator with these and picks among them.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from gateway.scheduler.accounting import Attribution, Budget, account
from gateway.scheduler.decision import PlacementRequest, ReasonCode
from gateway.scheduler.eviction import (
    busy_deployments,
    choose_evictions,
    cooldown_remaining_ms,
    evictable_when_idle,
    eviction_candidates,
    eviction_cost_floor,
    in_cooldown,
    is_evictable,
)
from gateway.scheduler.policy import SchedulerPolicy
from gateway.scheduler.pressure import recovery_wait_s
from gateway.scheduler.state import AcceleratorState, ModelEnvelope, ResidencyState, Resident

R = ReasonCode
# Enum members read through their class cost ~0.1-0.2 µs each on Python 3.11; these are read per
# accelerator or per resident of every decision.
_UNLOADING = ResidencyState.UNLOADING
_UNKNOWN = Attribution.UNKNOWN


class Assessment(msgspec.Struct, frozen=True):
    """One accelerator judged for one placement."""

    state: AcceleratorState
    budget: Budget
    fits: bool
    evicted: tuple[Resident, ...] = ()
    forced: bool = False
    headroom_after: int = 0
    reasons: tuple[ReasonCode, ...] = ()
    waitable: bool = False
    wait_ms: float = 0.0
    # screened only: fits if ``must_evict`` plus idle residents freeing ``must_free`` bytes more
    # are evicted; plan not made yet
    pending: bool = False
    must_evict: tuple[Resident, ...] = ()
    must_free: int = 0


class Ask(msgspec.Struct, frozen=True):
    """What every step needs to know about the request being placed."""

    envelope: ModelEnvelope
    request: PlacementRequest
    policy: SchedulerPolicy
    now: float
    fingerprint: str
    required: int = 0
    cold: bool = False
    load: int = 0  # of `required`, what a cold load's reservation holds


def screen_cold(ask: Ask, state: AcceleratorState, unsafe: frozenset[str]) -> Assessment:
    policy = ask.policy
    budget = account(state, policy, ask.now)
    if ask.request.load_failed_on and state.accelerator_id in ask.request.load_failed_on:
        return Assessment(state, budget, False, reasons=(R.RESIDENCY_LOAD_FAILED,))
    recovery_s = recovery_wait_s(state.pressure, budget.utilisation, ask.now, policy)
    if recovery_s is not None:
        # Worth waiting for unless the load could never fit there; how long is the deadline's to judge.
        fits_ever = ask.required <= budget.total_bytes - budget.safety_reserve_bytes
        reasons = (R.PRESSURE_CRITICAL,)
        return Assessment(
            state, budget, False, reasons=reasons, waitable=fits_ever, wait_ms=recovery_s * 1000
        )
    if budget.attribution is _UNKNOWN and policy.cold_load_requires_known_attribution:
        return Assessment(state, budget, False, reasons=(R.ATTRIBUTION_UNKNOWN,), waitable=True)
    forced: tuple[Resident, ...] = ()
    if unsafe:
        forced = tuple(item for item in state.residents if item.deployment_id in unsafe)
        if forced:
            busy = busy_deployments(state)
            if not all(is_evictable(item, busy, ask.request.channel) for item in forced):
                return Assessment(state, budget, False, reasons=(R.CO_RESIDENCY_UNSAFE,))
    return screen(ask, state, budget, forced)


def screen(ask: Ask, state: AcceleratorState, budget: Budget, forced: tuple[Resident, ...]) -> Assessment:
    """Does the required amount fit on ``state`` as is, never, or maybe after evicting ``forced`` and more?"""
    required = ask.required
    if required > budget.total_bytes - budget.safety_reserve_bytes:
        return Assessment(state, budget, False, reasons=(R.EXCEEDS_ACCELERATOR_CAPACITY,))
    schedulable = budget.schedulable_bytes
    if not forced and required <= schedulable:
        return Assessment(state, budget, True, headroom_after=schedulable - required)
    deficit = required - schedulable - (bytes_of(forced) if forced else 0)
    return Assessment(state, budget, False, pending=True, must_evict=forced, must_free=deficit)


def plan_evictions(ask: Ask, screened: Assessment) -> Assessment:
    """The cheapest minimal eviction set making room on a screened accelerator, or why there is none."""
    state, budget, forced, deficit = screened.state, screened.budget, screened.must_evict, screened.must_free
    candidates = eviction_candidates(state, ask.request.channel, ask.envelope.deployment_id, forced)
    # cheap feasibility test first: no walk through the candidates of an accelerator that cannot make room
    enough = bytes_of(candidates) >= deficit
    plan = choose_evictions(candidates, deficit, ordered=True) if enough else None
    cooldown = ask.policy.eviction_cooldown_seconds
    # The cooldown holds back an eviction there is a plan for; with none (the residents in the way
    # are busy) the wait is for leases to end, whatever the cooldown.
    if plan is not None and in_cooldown(state, cooldown, ask.now):
        wait_ms = cooldown_remaining_ms(state, cooldown, ask.now)
        return Assessment(
            state, budget, False, reasons=(R.EVICTION_COOLDOWN,), waitable=True, wait_ms=wait_ms
        )
    if plan is None:
        if _fits_after_waiting(ask, state, budget, forced):
            reasons = (R.INSUFFICIENT_VRAM_AFTER_EVICTION, R.WAITING_FOR_LEASES)
            return Assessment(state, budget, False, reasons=reasons, waitable=True)
        return Assessment(state, budget, False, reasons=(R.INSUFFICIENT_VRAM_AFTER_EVICTION,))
    return Assessment(
        state,
        budget,
        True,
        evicted=forced + plan,
        forced=bool(forced),
        headroom_after=bytes_of(plan) - deficit,
    )


def cannot_beat(ask: Ask, screened: Assessment, best_key: tuple[tuple[int, float, int], int]) -> bool:
    """True when no eviction plan on ``screened`` can have a smaller (cost, headroom after) than ``best_key``."""
    floor = eviction_cost_floor(
        screened.state,
        ask.request.channel,
        ask.envelope.deployment_id,
        screened.must_evict,
        screened.must_free,
    )
    return floor is not None and best_key <= floor


def _fits_after_waiting(
    ask: Ask, state: AcceleratorState, budget: Budget, forced: tuple[Resident, ...]
) -> bool:
    """Would it fit once in-flight leases end, unloads finish and busy residents turn idle, and a
    telemetry sample older than the last load or eviction here is replaced?"""
    freeable = sum([item.reserved_bytes for item in state.leases])
    if _sampled_before_last_change(state):
        # What that sample saw outside the books may be the change's own (a load's peak, a worker
        # not yet gone): the next sample says whether it lasts. Refusing on it refused requests a
        # moment after a model swap on a device they fit (the two-model storm, docs/engineering.md).
        freeable += budget.external_bytes
    for item in state.residents:
        if item.deployment_id == ask.envelope.deployment_id:
            continue
        if item.state is _UNLOADING or item in forced or evictable_when_idle(item, ask.request.channel):
            freeable += item.measured_bytes
    return ask.required <= budget.schedulable_bytes + freeable


def _sampled_before_last_change(state: AcceleratorState) -> bool:
    observed_at = state.observed_at
    changed_at = max(state.last_load_at or 0.0, state.last_eviction_at or 0.0)
    return observed_at is not None and observed_at < changed_at


def bytes_of(residents: Sequence[Resident]) -> int:
    """Their measured bytes together (a plain loop: ``sum(map(attrgetter(...)))`` is twice as slow on 3.11)."""
    total = 0
    for item in residents:
        total += item.measured_bytes
    return total
