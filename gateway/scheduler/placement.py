"""Placement: decide, for one request, where its model runs — or why it waits, or why not.

Order of preference:

1. The model is loaded somewhere eligible: run it there (the accelerator with the most
   headroom), evicting idle residents if even the execution floor does not fit.  No second
   replica is cold-loaded while one is resident: a busy replica means QUEUE.
2. The model is loading somewhere: QUEUE behind the load.
3. Cold load: best fit (least headroom left) among accelerators where it fits as is; otherwise
   the accelerator whose eviction set is cheapest.  PROVEN_UNSAFE partners already resident must
   be evicted (or the accelerator is out); critical pressure and unknown attribution keep cold
   loads away; the eviction cooldown is respected.
4. Nothing fits now but would once in-flight leases, loads or cooldowns finish: QUEUE, if the
   global queue has room and the deadline allows.  Else REJECT_* with reason codes.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter

import msgspec

from gateway.scheduler.accounting import Attribution, Budget, account, required_bytes
from gateway.scheduler.decision import (
    CoResidencyPair,
    CoResidencyStatus,
    PlacementDecision,
    PlacementRequest,
    ReasonCode,
    Verdict,
)
from gateway.scheduler.eviction import (
    busy_deployments,
    choose_evictions,
    cooldown_remaining_ms,
    evictable_when_idle,
    eviction_candidates,
    eviction_cost,
    eviction_cost_floor,
    in_cooldown,
    is_evictable,
)
from gateway.scheduler.fingerprint import by_accelerator_id, ordered_fingerprint
from gateway.scheduler.policy import SchedulerPolicy
from gateway.scheduler.pressure import next_pressure
from gateway.scheduler.state import AcceleratorState, ModelEnvelope, Pressure, ResidencyState, Resident

R = ReasonCode
# Enum members read through their class cost ~0.2 µs each on Python 3.11; these are read per
# accelerator (or per resident) of every decision.
_LOADED = ResidencyState.LOADED
_LOADING = ResidencyState.LOADING
_UNLOADING = ResidencyState.UNLOADING
_CRITICAL = Pressure.CRITICAL
_UNKNOWN = Attribution.UNKNOWN
_PROVEN_UNSAFE = CoResidencyStatus.PROVEN_UNSAFE
_deployment_id = attrgetter("deployment_id")
_measured_bytes = attrgetter("measured_bytes")


class _Assessment(msgspec.Struct, frozen=True):
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
    # screened only: fits if ``forced`` plus some idle residents are evicted; plan not made yet
    pending: bool = False
    must_evict: tuple[Resident, ...] = ()


class _Ask(msgspec.Struct, frozen=True):
    """What every step needs to know about the request being placed."""

    envelope: ModelEnvelope
    request: PlacementRequest
    policy: SchedulerPolicy
    now: float
    fingerprint: str
    required: int = 0
    cold: bool = False


def plan_placement(
    accelerators: Sequence[AcceleratorState],
    envelope: ModelEnvelope,
    request: PlacementRequest,
    policy: SchedulerPolicy,
    now: float,
    co_residency: Sequence[CoResidencyPair] = (),
) -> PlacementDecision:
    """Decide one request's placement.  Pure: same inputs, same decision and fingerprint."""
    deployment = envelope.deployment_id
    pairs = [pair for pair in co_residency if pair.left == deployment or pair.right == deployment]
    ordered = sorted(accelerators, key=by_accelerator_id)  # once: for the fingerprint and eligibility
    fingerprint = ordered_fingerprint(ordered, envelope, request, policy, now, pairs)

    if envelope.stale:
        return _decision(
            _Ask(envelope, request, policy, now, fingerprint),
            Verdict.REJECT_STATE_STALE,
            (R.SCHEDULER_STATE_STALE,),
        )
    if not request.runtime_healthy:
        return _decision(
            _Ask(envelope, request, policy, now, fingerprint),
            Verdict.REJECT_NO_ELIGIBLE_ACCELERATOR,
            (R.RUNTIME_UNHEALTHY,),
        )
    allowed = request.accelerator_ids
    eligible = [
        item for item in ordered if item.available and (not allowed or item.accelerator_id in allowed)
    ]
    if not eligible:
        return _decision(
            _Ask(envelope, request, policy, now, fingerprint),
            Verdict.REJECT_NO_ELIGIBLE_ACCELERATOR,
            (R.NO_ELIGIBLE_NODE,),
        )

    hosting: list[AcceleratorState] = []
    loading: list[AcceleratorState] = []
    for item in eligible:
        if deployment not in map(_deployment_id, item.residents):  # C-speed scan: usually absent
            continue
        for resident in item.residents:
            if resident.deployment_id == deployment:
                if resident.state is _LOADED:
                    hosting.append(item)
                elif resident.state is _LOADING:
                    loading.append(item)

    if hosting or loading:
        ask = _Ask(envelope, request, policy, now, fingerprint, required_bytes(envelope, True, policy))
        if request.deadline_ms is not None and request.deadline_ms <= 0:
            return _decision(ask, Verdict.REJECT_DEADLINE, (R.DEADLINE_EXCEEDED,))
        if not hosting:
            waiting = _Assessment(loading[0], account(loading[0], policy, now), False, waitable=True)
            return _queue(ask, waiting, (R.RESIDENCY_LOADING,))
        return _conclude(ask, [_screen(ask, item, account(item, policy, now), ()) for item in hosting])

    ask = _Ask(envelope, request, policy, now, fingerprint, required_bytes(envelope, False, policy), True)
    if request.deadline_ms is not None and request.deadline_ms <= envelope.cold_load_ms:
        return _decision(ask, Verdict.REJECT_DEADLINE, (R.DEADLINE_EXCEEDED,))
    unsafe = frozenset(
        [
            pair.right if pair.left == deployment else pair.left
            for pair in pairs
            if pair.status is _PROVEN_UNSAFE
        ]
    )
    return _conclude(ask, [_screen_cold(ask, item, unsafe) for item in eligible])


def _decision(
    ask: _Ask,
    verdict: Verdict,
    reasons: Sequence[ReasonCode],
    chosen: _Assessment | None = None,
) -> PlacementDecision:
    placed = admitted = False
    if chosen is not None:
        placed = not verdict.rejects
        admitted = verdict.admits
    evicted = chosen.evicted if chosen is not None and admitted else ()
    return PlacementDecision(
        verdict=verdict,
        accelerator_id=chosen.state.accelerator_id if chosen is not None and placed else None,
        node_id=chosen.state.node_id if chosen is not None and placed else None,
        reason_codes=tuple(dict.fromkeys(reasons)),
        evictions=tuple([item.deployment_id for item in evicted]) if evicted else (),
        required_bytes=ask.required,
        budget=chosen.budget if chosen is not None else None,
        headroom_after_bytes=chosen.headroom_after if chosen is not None and admitted else None,
        reclaimed_bytes=sum(map(_measured_bytes, evicted)) if evicted else 0,
        cold_load=ask.cold,
        fingerprint=ask.fingerprint,
    )


def _conclude(ask: _Ask, assessments: list[_Assessment]) -> PlacementDecision:
    """Pick the winner among assessed accelerators (given in id order), or wait, or refuse."""
    kind = R.COLD_LOAD if ask.cold else R.RESIDENT_WARM
    direct = [item for item in assessments if item.fits and not item.evicted]
    if direct:
        # warm: spread (most headroom left); cold: best fit (least headroom left)
        sign = 1 if ask.cold else -1
        best = min(direct, key=lambda item: sign * item.headroom_after)
        reasons = [kind]
        if best.budget.attribution is _UNKNOWN:
            reasons.append(R.ATTRIBUTION_UNKNOWN)
        return _decision(ask, Verdict.ADMIT, reasons, best)
    # Plan evictions only when nothing fits as is (best fit needs no eviction at all), and on an
    # accelerator only while its cost floor could still beat the cheapest plan found so far:
    # the winner is the first accelerator (in id order) with the least (cost, headroom after).
    cheapest: _Assessment | None = None
    best_key: tuple[tuple[int, float, int], int] | None = None
    planned = []
    for item in assessments:
        if item.pending and (best_key is None or not _cannot_beat(ask, item, best_key)):
            item = _plan_evictions(ask, item)
            if item.fits:
                key = (eviction_cost(item.evicted), item.headroom_after)
                if best_key is None or key < best_key:
                    cheapest, best_key = item, key
        planned.append(item)
    if cheapest is not None:
        reasons = [kind, R.EVICTION_REQUIRED]
        if cheapest.forced:
            reasons.append(R.CO_RESIDENCY_EVICTION)
        return _decision(ask, Verdict.ADMIT_AFTER_EVICTION, reasons, cheapest)
    # nothing was skipped: skipping starts only once some plan fits
    assessments = planned
    waitable = [item for item in assessments if item.waitable]
    if waitable:
        best = max(waitable, key=lambda item: item.budget.schedulable_bytes)
        return _queue(ask, best, best.reasons)
    closest = max(assessments, key=lambda item: item.budget.schedulable_bytes)
    reasons = [R.INSUFFICIENT_SCHEDULABLE_VRAM]
    for item in assessments:
        reasons.extend(item.reasons)
    return _decision(ask, Verdict.REJECT_INSUFFICIENT_CAPACITY, reasons, closest)


def _queue(ask: _Ask, waiting: _Assessment, reasons: Sequence[ReasonCode]) -> PlacementDecision:
    """QUEUE on ``waiting`` — if the deadline and the global queue allow it."""
    policy = ask.policy
    deadline = ask.request.deadline_ms
    work_ms = ask.envelope.cold_load_ms if ask.cold else 0.0
    if waiting.wait_ms >= policy.max_queue_wait_seconds * 1000.0 or (
        deadline is not None and deadline <= waiting.wait_ms + work_ms
    ):
        return _decision(ask, Verdict.REJECT_DEADLINE, (R.DEADLINE_EXCEEDED, *reasons), waiting)
    if ask.request.queue_depth >= policy.global_queue_limit:
        return _decision(ask, Verdict.REJECT_QUEUE_FULL, (R.QUEUE_FULL, *reasons), waiting)
    return _decision(ask, Verdict.QUEUE, reasons, waiting)


def _screen_cold(ask: _Ask, state: AcceleratorState, unsafe: frozenset[str]) -> _Assessment:
    policy = ask.policy
    budget = account(state, policy, ask.now)
    critical = state.pressure.level is _CRITICAL or budget.utilisation >= policy.pressure_critical_at
    if critical and next_pressure(state.pressure, budget.utilisation, ask.now, policy).level is _CRITICAL:
        return _Assessment(state, budget, False, reasons=(R.PRESSURE_CRITICAL,))
    if budget.attribution is _UNKNOWN and policy.cold_load_requires_known_attribution:
        return _Assessment(state, budget, False, reasons=(R.ATTRIBUTION_UNKNOWN,), waitable=True)
    forced: tuple[Resident, ...] = ()
    if unsafe:
        forced = tuple(item for item in state.residents if item.deployment_id in unsafe)
        if forced:
            busy = busy_deployments(state)
            if not all(is_evictable(item, busy, ask.request.channel) for item in forced):
                return _Assessment(state, budget, False, reasons=(R.CO_RESIDENCY_UNSAFE,))
    return _screen(ask, state, budget, forced)


def _screen(ask: _Ask, state: AcceleratorState, budget: Budget, forced: tuple[Resident, ...]) -> _Assessment:
    """Does the required amount fit on ``state`` as is, never, or maybe after evicting ``forced`` and more?"""
    if ask.required > budget.total_bytes - budget.safety_reserve_bytes:
        return _Assessment(state, budget, False, reasons=(R.EXCEEDS_ACCELERATOR_CAPACITY,))
    if not forced and ask.required <= budget.schedulable_bytes:
        return _Assessment(state, budget, True, headroom_after=budget.schedulable_bytes - ask.required)
    return _Assessment(state, budget, False, pending=True, must_evict=forced)


def _plan_evictions(ask: _Ask, screened: _Assessment) -> _Assessment:
    """The cheapest minimal eviction set making room on a screened accelerator, or why there is none."""
    state, budget, forced = screened.state, screened.budget, screened.must_evict
    headroom = budget.schedulable_bytes + (sum(map(_measured_bytes, forced)) if forced else 0)
    deficit = ask.required - headroom
    candidates = eviction_candidates(state, ask.request.channel, ask.envelope.deployment_id, forced)
    # cheap feasibility test first: most accelerators that cannot make room are skipped unsorted
    enough = sum(map(_measured_bytes, candidates)) >= deficit
    plan = choose_evictions(candidates, deficit, ordered=True) if enough else None
    cooldown = ask.policy.eviction_cooldown_seconds
    if in_cooldown(state, cooldown, ask.now):
        waitable = plan is not None or _fits_after_waiting(ask, state, budget, forced)
        wait_ms = cooldown_remaining_ms(state, cooldown, ask.now)
        return _Assessment(
            state, budget, False, reasons=(R.EVICTION_COOLDOWN,), waitable=waitable, wait_ms=wait_ms
        )
    if plan is None:
        if _fits_after_waiting(ask, state, budget, forced):
            reasons = (R.INSUFFICIENT_VRAM_AFTER_EVICTION, R.WAITING_FOR_LEASES)
            return _Assessment(state, budget, False, reasons=reasons, waitable=True)
        return _Assessment(state, budget, False, reasons=(R.INSUFFICIENT_VRAM_AFTER_EVICTION,))
    freed = sum(map(_measured_bytes, plan))
    return _Assessment(
        state,
        budget,
        True,
        evicted=forced + plan,
        forced=bool(forced),
        headroom_after=headroom + freed - ask.required,
    )


def _cannot_beat(ask: _Ask, screened: _Assessment, best_key: tuple[tuple[int, float, int], int]) -> bool:
    """True when no eviction plan on ``screened`` can have a smaller (cost, headroom after) than ``best_key``."""
    forced = screened.must_evict
    headroom = screened.budget.schedulable_bytes + (sum(map(_measured_bytes, forced)) if forced else 0)
    floor = eviction_cost_floor(
        screened.state, ask.request.channel, ask.envelope.deployment_id, forced, ask.required - headroom
    )
    return floor is not None and best_key <= floor


def _fits_after_waiting(
    ask: _Ask, state: AcceleratorState, budget: Budget, forced: tuple[Resident, ...]
) -> bool:
    """Would it fit once in-flight leases end, unloads finish and busy residents turn idle?"""
    freeable = sum([item.reserved_bytes for item in state.leases])
    for item in state.residents:
        if item.deployment_id == ask.envelope.deployment_id:
            continue
        if item.state is _UNLOADING or item in forced or evictable_when_idle(item, ask.request.channel):
            freeable += item.measured_bytes
    return ask.required <= budget.schedulable_bytes + freeable
