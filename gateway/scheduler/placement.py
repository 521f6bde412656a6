"""Placement: decide, for one request, where its model runs — or why it waits, or why not.

Order of preference:

0. Only accelerators of a hardware class the envelope was measured on are eligible
   (``fleet.measured_here``); none: ENVELOPE_CLASS_UNMEASURED.
1. The model is loaded somewhere eligible: run it on the least-loaded copy (fewest requests,
   then the most headroom), evicting idle residents if even the execution floor does not fit.
   A request never cold-loads a second copy while one is resident: a busy copy means QUEUE
   (further copies are the residency upkeep's, placed with ``new_replica``).
2. The model is loading somewhere: QUEUE behind the load.
3. Cold load: best fit (least headroom left; the most free memory for a ``spread`` deployment)
   among accelerators where it fits as is, a further copy on a node without one first; otherwise
   the accelerator whose eviction set is cheapest.  Not where its last load failed, recently.  PROVEN_UNSAFE partners already resident must
   be evicted (or the accelerator is out); critical pressure and unknown attribution keep cold
   loads away; the eviction cooldown is respected.
4. Nothing fits now but would once in-flight leases, loads or cooldowns finish: QUEUE, if the
   global queue has room and the deadline allows.  Else REJECT_* with reason codes.
"""

from __future__ import annotations

from collections.abc import Sequence

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
from gateway.scheduler.fingerprint import (
    CanonicalPair,
    by_accelerator_id,
    canonical_pair,
    ordered_fingerprint,
)
from gateway.scheduler.fleet import holds_copy, leases_of, measured_here, nodes_with_copy
from gateway.scheduler.policy import SchedulerPolicy
from gateway.scheduler.pressure import refuses_cold_loads
from gateway.scheduler.state import (
    AcceleratorState,
    Channel,
    ModelEnvelope,
    ResidencyState,
    Resident,
)

R = ReasonCode
# Enum members read through their class cost ~0.1-0.2 µs each on Python 3.11; these are read per
# accelerator (or per resident) of every decision, or once on every warm hit and cold load.
_LOADED = ResidencyState.LOADED
_LOADING = ResidencyState.LOADING
_UNLOADING = ResidencyState.UNLOADING
_UNKNOWN = Attribution.UNKNOWN
_PROVEN_UNSAFE = CoResidencyStatus.PROVEN_UNSAFE
_ADMIT = Verdict.ADMIT
_ADMIT_AFTER_EVICTION = Verdict.ADMIT_AFTER_EVICTION
_RESIDENT_WARM = R.RESIDENT_WARM
_COLD_LOAD = R.COLD_LOAD
_EVICTION_REQUIRED = R.EVICTION_REQUIRED
_ATTRIBUTION_UNKNOWN = R.ATTRIBUTION_UNKNOWN
_NOBODY: frozenset[str] = frozenset()  # no PROVEN_UNSAFE partner, the usual case: no set to build
_UNMEASURED = (R.ENVELOPE_CLASS_UNMEASURED,)


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
    # screened only: fits if ``must_evict`` plus idle residents freeing ``must_free`` bytes more
    # are evicted; plan not made yet
    pending: bool = False
    must_evict: tuple[Resident, ...] = ()
    must_free: int = 0


class _Ask(msgspec.Struct, frozen=True):
    """What every step needs to know about the request being placed."""

    envelope: ModelEnvelope
    request: PlacementRequest
    policy: SchedulerPolicy
    now: float
    fingerprint: str
    required: int = 0
    cold: bool = False
    load: int = 0  # of `required`, what a cold load's reservation holds


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
    facts, unsafe = _co_residency(co_residency, deployment)
    ordered = sorted(accelerators, key=by_accelerator_id)  # once: for the fingerprint and eligibility
    fingerprint = ordered_fingerprint(ordered, envelope, request, policy, now, facts)

    if policy.lab_paused and request.channel is Channel.LAB:
        return _decision(
            _Ask(envelope, request, policy, now, fingerprint), Verdict.REJECT_LAB_PAUSED, (R.LAB_PAUSED,)
        )
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
    eligible = [item for item in eligible if measured_here(envelope, item)]
    if not eligible:
        ask = _Ask(envelope, request, policy, now, fingerprint)
        return _decision(ask, Verdict.REJECT_NO_ELIGIBLE_ACCELERATOR, _UNMEASURED)
    if request.new_replica:
        return _place_replica(envelope, request, policy, now, fingerprint, eligible, unsafe)

    hosting, loading, unloading = _replicas(eligible, deployment)
    if hosting or loading:
        ask = _Ask(envelope, request, policy, now, fingerprint, required_bytes(envelope, True, policy))
        if request.deadline_ms is not None and request.deadline_ms <= 0:
            return _decision(ask, Verdict.REJECT_DEADLINE, (R.DEADLINE_EXCEEDED,))
        if not hosting:
            waiting = _Assessment(loading[0], account(loading[0], policy, now), False, waitable=True)
            return _queue(ask, waiting, (R.RESIDENCY_LOADING,))
        return _conclude(ask, [_screen(ask, item, account(item, policy, now), ()) for item in hosting])

    # A cold request books its model's load and, beside it, its own lease of the execution floor:
    # it must fit both (placement checked the load alone, and the books went past capacity by a floor).
    load = required_bytes(envelope, False, policy)
    ask = _Ask(
        envelope, request, policy, now, fingerprint, load + required_bytes(envelope, True, policy), True, load
    )
    if envelope.outgrown:
        return _decision(ask, Verdict.REJECT_STATE_STALE, (R.SCHEDULER_STATE_STALE,))
    if request.deadline_ms is not None and request.deadline_ms <= envelope.cold_load_ms:
        return _decision(ask, Verdict.REJECT_DEADLINE, (R.DEADLINE_EXCEEDED,))
    if unloading:
        # A copy still being unloaded holds its place on the books until its unload is reported;
        # loading another beside it would put one resident where the books keep two: wait.
        waiting = _Assessment(unloading[0], account(unloading[0], policy, now), False, waitable=True)
        return _queue(ask, waiting, (R.RESIDENCY_UNLOADING,))
    return _conclude(ask, [_screen_cold(ask, item, unsafe) for item in eligible])


def _place_replica(
    envelope: ModelEnvelope,
    request: PlacementRequest,
    policy: SchedulerPolicy,
    now: float,
    fingerprint: str,
    eligible: list[AcceleratorState],
    unsafe: frozenset[str],
) -> PlacementDecision:
    """A further copy: a cold load on an accelerator holding none, on a node holding none if one
    can take it (as is or by evicting), else beside another copy."""
    deployment = envelope.deployment_id
    load = required_bytes(envelope, False, policy)  # a copy alone: no request leases beside it
    ask = _Ask(envelope, request, policy, now, fingerprint, load, True, load)
    if envelope.outgrown:
        return _decision(ask, Verdict.REJECT_STATE_STALE, (R.SCHEDULER_STATE_STALE,))
    free = [item for item in eligible if not holds_copy(item, deployment)]
    if not free:
        return _decision(ask, Verdict.REJECT_INSUFFICIENT_CAPACITY, (R.INSUFFICIENT_SCHEDULABLE_VRAM,))
    crowded = nodes_with_copy(eligible, deployment)
    elsewhere = [item for item in free if item.node_id not in crowded]
    if elsewhere and len(elsewhere) < len(free):
        decision = _conclude(ask, [_screen_cold(ask, item, unsafe) for item in elsewhere])
        if decision.verdict.admits:
            return decision
    return _conclude(ask, [_screen_cold(ask, item, unsafe) for item in free])


def _co_residency(
    pairs: Sequence[CoResidencyPair], deployment: str
) -> tuple[list[CanonicalPair], frozenset[str]]:
    """The pairs that name ``deployment``, in canonical form (the fingerprint covers these and no
    others), and its PROVEN_UNSAFE partners.  One pass: every decision reads them."""
    facts: list[CanonicalPair] = []
    unsafe: list[str] = []
    for pair in pairs:
        left, right = pair.left, pair.right
        if left == deployment:
            partner = right
        elif right == deployment:
            partner = left
        else:
            continue
        facts.append(canonical_pair(pair))
        if pair.status is _PROVEN_UNSAFE:
            unsafe.append(partner)
    return facts, frozenset(unsafe) if unsafe else _NOBODY


def _replicas(
    eligible: list[AcceleratorState], deployment: str
) -> tuple[list[AcceleratorState], list[AcceleratorState], list[AcceleratorState]]:
    """The eligible accelerators where ``deployment`` is loaded, loading, and being unloaded."""
    hosting: list[AcceleratorState] = []
    loading: list[AcceleratorState] = []
    unloading: list[AcceleratorState] = []
    # A plain loop: its attribute reads cost ~25 ns a resident, ``in map(attrgetter(...))`` ~55.
    for item in eligible:
        for resident in item.residents:
            if resident.deployment_id == deployment:
                if resident.state is _LOADED:
                    hosting.append(item)
                elif resident.state is _LOADING:
                    loading.append(item)
                elif resident.state is _UNLOADING:
                    unloading.append(item)
    return hosting, loading, unloading


def _decision(
    ask: _Ask,
    verdict: Verdict,
    reasons: tuple[ReasonCode, ...],
    chosen: _Assessment | None = None,
) -> PlacementDecision:
    """The decision, ``reasons`` as given: callers that merge reasons remove repeats themselves."""
    placed = admitted = False
    if chosen is not None:
        placed = not verdict.rejects
        admitted = verdict.admits
    evicted = chosen.evicted if chosen is not None and admitted else ()
    return PlacementDecision(
        verdict=verdict,
        accelerator_id=chosen.state.accelerator_id if chosen is not None and placed else None,
        node_id=chosen.state.node_id if chosen is not None and placed else None,
        reason_codes=reasons,
        evictions=tuple([item.deployment_id for item in evicted]) if evicted else (),
        required_bytes=ask.required,
        load_bytes=ask.load,
        budget=chosen.budget if chosen is not None else None,
        headroom_after_bytes=chosen.headroom_after if chosen is not None and admitted else None,
        reclaimed_bytes=_bytes_of(evicted) if evicted else 0,
        cold_load=ask.cold,
        fingerprint=ask.fingerprint,
    )


def cold_load_estimate_ms(envelope: ModelEnvelope, state: AcceleratorState, policy: SchedulerPolicy) -> float:
    """How long a cold load on `state`'s node is expected to take: the measured load, plus fetching
    the artifact set from the bucket where the node does not hold it."""
    if not envelope.artifact_set_id or envelope.artifact_set_id in state.cached_sets:
        return envelope.cold_load_ms
    return envelope.cold_load_ms + envelope.artifact_bytes * 1000.0 / policy.artifact_fetch_bytes_per_s


def _soonest_loaded(ask: _Ask, assessments: list[_Assessment]) -> list[_Assessment]:
    """Of the accelerators a cold load fits as is, those it is expected to finish on soonest
    (locality); all of them when it fits on none, or for a warm request."""
    if not ask.cold:
        return assessments
    fitting = [(cold_load_estimate_ms(ask.envelope, a.state, ask.policy), a) for a in assessments if a.fits]
    if not fitting:
        return assessments
    soonest = min(estimate for estimate, _ in fitting)
    return [a for estimate, a in fitting if estimate == soonest]


def _conclude(ask: _Ask, assessments: list[_Assessment]) -> PlacementDecision:
    """Pick the winner among assessed accelerators (given in id order), or wait, or refuse."""
    kind = _COLD_LOAD if ask.cold else _RESIDENT_WARM
    best = _best_fit(ask, _soonest_loaded(ask, assessments))
    if best is not None:
        reasons = (kind, _ATTRIBUTION_UNKNOWN) if best.budget.attribution is _UNKNOWN else (kind,)
        return _decision(ask, _ADMIT, reasons, best)
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
        made_room = (
            (kind, _EVICTION_REQUIRED, R.CO_RESIDENCY_EVICTION)
            if cheapest.forced
            else (kind, _EVICTION_REQUIRED)
        )
        return _decision(ask, _ADMIT_AFTER_EVICTION, made_room, cheapest)
    # nothing was skipped: skipping starts only once some plan fits
    assessments = planned
    waitable = [item for item in assessments if item.waitable]
    if waitable:
        best = max(waitable, key=lambda item: item.budget.schedulable_bytes)
        return _queue(ask, best, best.reasons)
    closest = max(assessments, key=lambda item: item.budget.schedulable_bytes)
    # The first reason is the client's error: critical pressure, or a load that just failed there,
    # when it is what keeps every accelerator out; else the lack of room.
    first = R.INSUFFICIENT_SCHEDULABLE_VRAM
    for only in (R.PRESSURE_CRITICAL, R.RESIDENCY_LOAD_FAILED):
        if all(only in item.reasons for item in assessments):
            first = only
    refusals = [first]
    for item in assessments:
        refusals.extend(item.reasons)
    unique = tuple(dict.fromkeys(refusals))  # accelerators refused for the same reason: name it once
    return _decision(ask, Verdict.REJECT_INSUFFICIENT_CAPACITY, unique, closest)


def _best_fit(ask: _Ask, assessments: list[_Assessment]) -> _Assessment | None:
    """The accelerator to use as is (``_preference``); the first in id order on a tie.  ``None``
    if it fits nowhere as is."""
    best: _Assessment | None = None
    least = (0, 0)
    for item in assessments:
        if item.fits:
            key = _preference(ask, item)
            if best is None or key < least:
                best, least = item, key
    return best


def _preference(ask: _Ask, item: _Assessment) -> tuple[int, int]:
    """Smaller is better.  Warm: the copy serving the fewest requests, then the most headroom.
    Cold: the least headroom left (binpack), or the most (spread)."""
    if not ask.cold:
        return (leases_of(item.state, ask.envelope.deployment_id), -item.headroom_after)
    return (0, -item.headroom_after if ask.envelope.spread else item.headroom_after)


def _queue(ask: _Ask, waiting: _Assessment, reasons: tuple[ReasonCode, ...]) -> PlacementDecision:
    """QUEUE on ``waiting`` — if the deadline and the global queue allow it."""
    policy = ask.policy
    deadline = ask.request.deadline_ms
    work_ms = ask.envelope.cold_load_ms if ask.cold else 0.0
    if waiting.wait_ms >= policy.max_queue_wait_seconds * 1000.0 or (
        deadline is not None and deadline <= waiting.wait_ms + work_ms
    ):
        return _decision(ask, Verdict.REJECT_DEADLINE, (R.DEADLINE_EXCEEDED, *reasons), waiting)
    if not ask.request.queued and ask.request.queue_depth >= policy.global_queue_limit:
        return _decision(ask, Verdict.REJECT_QUEUE_FULL, (R.QUEUE_FULL, *reasons), waiting)
    return _decision(ask, Verdict.QUEUE, reasons, waiting)


def _screen_cold(ask: _Ask, state: AcceleratorState, unsafe: frozenset[str]) -> _Assessment:
    policy = ask.policy
    budget = account(state, policy, ask.now)
    if ask.request.load_failed_on and state.accelerator_id in ask.request.load_failed_on:
        return _Assessment(state, budget, False, reasons=(R.RESIDENCY_LOAD_FAILED,))
    if refuses_cold_loads(state.pressure, budget.utilisation, ask.now, policy):
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
    required = ask.required
    if required > budget.total_bytes - budget.safety_reserve_bytes:
        return _Assessment(state, budget, False, reasons=(R.EXCEEDS_ACCELERATOR_CAPACITY,))
    schedulable = budget.schedulable_bytes
    if not forced and required <= schedulable:
        return _Assessment(state, budget, True, headroom_after=schedulable - required)
    deficit = required - schedulable - (_bytes_of(forced) if forced else 0)
    return _Assessment(state, budget, False, pending=True, must_evict=forced, must_free=deficit)


def _plan_evictions(ask: _Ask, screened: _Assessment) -> _Assessment:
    """The cheapest minimal eviction set making room on a screened accelerator, or why there is none."""
    state, budget, forced, deficit = screened.state, screened.budget, screened.must_evict, screened.must_free
    candidates = eviction_candidates(state, ask.request.channel, ask.envelope.deployment_id, forced)
    # cheap feasibility test first: no walk through the candidates of an accelerator that cannot make room
    enough = _bytes_of(candidates) >= deficit
    plan = choose_evictions(candidates, deficit, ordered=True) if enough else None
    cooldown = ask.policy.eviction_cooldown_seconds
    # The cooldown holds back an eviction there is a plan for; with none (the residents in the way
    # are busy) the wait is for leases to end, whatever the cooldown.
    if plan is not None and in_cooldown(state, cooldown, ask.now):
        wait_ms = cooldown_remaining_ms(state, cooldown, ask.now)
        return _Assessment(
            state, budget, False, reasons=(R.EVICTION_COOLDOWN,), waitable=True, wait_ms=wait_ms
        )
    if plan is None:
        if _fits_after_waiting(ask, state, budget, forced):
            reasons = (R.INSUFFICIENT_VRAM_AFTER_EVICTION, R.WAITING_FOR_LEASES)
            return _Assessment(state, budget, False, reasons=reasons, waitable=True)
        return _Assessment(state, budget, False, reasons=(R.INSUFFICIENT_VRAM_AFTER_EVICTION,))
    return _Assessment(
        state,
        budget,
        True,
        evicted=forced + plan,
        forced=bool(forced),
        headroom_after=_bytes_of(plan) - deficit,
    )


def _cannot_beat(ask: _Ask, screened: _Assessment, best_key: tuple[tuple[int, float, int], int]) -> bool:
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


def _bytes_of(residents: Sequence[Resident]) -> int:
    """Their measured bytes together (a plain loop: ``sum(map(attrgetter(...)))`` is twice as slow on 3.11)."""
    total = 0
    for item in residents:
        total += item.measured_bytes
    return total
