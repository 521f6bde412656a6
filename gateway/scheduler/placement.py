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
4. Nothing fits now but would once in-flight leases, loads, cooldowns or critical pressure finish:
   QUEUE, if the global queue has room and the deadline allows.  Else REJECT_* with reason codes;
   a wait for pressure that cannot end in time is refused PRESSURE_CRITICAL, DEADLINE_EXCEEDED.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.scheduler.accounting import Attribution, account, required_bytes
from gateway.scheduler.decision import (
    CoResidencyPair,
    CoResidencyStatus,
    PlacementDecision,
    PlacementRequest,
    ReasonCode,
    Verdict,
)
from gateway.scheduler.eviction import eviction_cost
from gateway.scheduler.fingerprint import (
    CanonicalPair,
    by_accelerator_id,
    canonical_pair,
    ordered_fingerprint,
)
from gateway.scheduler.fleet import holds_copy, leases_of, measured_here, nodes_with_copy
from gateway.scheduler.policy import SchedulerPolicy
from gateway.scheduler.screening import (
    Ask,
    Assessment,
    bytes_of,
    cannot_beat,
    plan_evictions,
    screen,
    screen_cold,
)
from gateway.scheduler.state import (
    AcceleratorState,
    Channel,
    ModelEnvelope,
    ResidencyState,
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
            Ask(envelope, request, policy, now, fingerprint), Verdict.REJECT_LAB_PAUSED, (R.LAB_PAUSED,)
        )
    if envelope.stale:
        return _decision(
            Ask(envelope, request, policy, now, fingerprint),
            Verdict.REJECT_STATE_STALE,
            (R.SCHEDULER_STATE_STALE,),
        )
    if not request.runtime_healthy:
        return _decision(
            Ask(envelope, request, policy, now, fingerprint),
            Verdict.REJECT_NO_ELIGIBLE_ACCELERATOR,
            (R.RUNTIME_UNHEALTHY,),
        )
    allowed = request.accelerator_ids
    eligible = [
        item for item in ordered if item.available and (not allowed or item.accelerator_id in allowed)
    ]
    if not eligible:
        return _decision(
            Ask(envelope, request, policy, now, fingerprint),
            Verdict.REJECT_NO_ELIGIBLE_ACCELERATOR,
            (R.NO_ELIGIBLE_NODE,),
        )
    eligible = [item for item in eligible if measured_here(envelope, item)]
    if not eligible:
        ask = Ask(envelope, request, policy, now, fingerprint)
        return _decision(ask, Verdict.REJECT_NO_ELIGIBLE_ACCELERATOR, _UNMEASURED)
    if request.new_replica:
        return _place_replica(envelope, request, policy, now, fingerprint, eligible, unsafe)

    hosting, loading, unloading = _replicas(eligible, deployment)
    if hosting or loading:
        ask = Ask(envelope, request, policy, now, fingerprint, required_bytes(envelope, True, policy))
        if request.deadline_ms is not None and request.deadline_ms <= 0:
            return _decision(ask, Verdict.REJECT_DEADLINE, (R.DEADLINE_EXCEEDED,))
        if not hosting:
            waiting = Assessment(loading[0], account(loading[0], policy, now), False, waitable=True)
            return _queue(ask, waiting, (R.RESIDENCY_LOADING,))
        return _conclude(ask, [screen(ask, item, account(item, policy, now), ()) for item in hosting])

    # A cold request books its model's load and, beside it, its own lease of the execution floor:
    # it must fit both (placement checked the load alone, and the books went past capacity by a floor).
    load = required_bytes(envelope, False, policy)
    ask = Ask(
        envelope, request, policy, now, fingerprint, load + required_bytes(envelope, True, policy), True, load
    )
    if envelope.outgrown:
        return _decision(ask, Verdict.REJECT_STATE_STALE, (R.SCHEDULER_STATE_STALE,))
    if request.deadline_ms is not None and request.deadline_ms <= envelope.cold_load_ms:
        return _decision(ask, Verdict.REJECT_DEADLINE, (R.DEADLINE_EXCEEDED,))
    if unloading:
        # A copy still being unloaded holds its place on the books until its unload is reported;
        # loading another beside it would put one resident where the books keep two: wait.
        waiting = Assessment(unloading[0], account(unloading[0], policy, now), False, waitable=True)
        return _queue(ask, waiting, (R.RESIDENCY_UNLOADING,))
    return _conclude(ask, [screen_cold(ask, item, unsafe) for item in eligible])


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
    ask = Ask(envelope, request, policy, now, fingerprint, load, True, load)
    if envelope.outgrown:
        return _decision(ask, Verdict.REJECT_STATE_STALE, (R.SCHEDULER_STATE_STALE,))
    free = [item for item in eligible if not holds_copy(item, deployment)]
    if not free:
        return _decision(ask, Verdict.REJECT_INSUFFICIENT_CAPACITY, (R.INSUFFICIENT_SCHEDULABLE_VRAM,))
    crowded = nodes_with_copy(eligible, deployment)
    elsewhere = [item for item in free if item.node_id not in crowded]
    if elsewhere and len(elsewhere) < len(free):
        decision = _conclude(ask, [screen_cold(ask, item, unsafe) for item in elsewhere])
        if decision.verdict.admits:
            return decision
    return _conclude(ask, [screen_cold(ask, item, unsafe) for item in free])


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
    ask: Ask,
    verdict: Verdict,
    reasons: tuple[ReasonCode, ...],
    chosen: Assessment | None = None,
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
        reclaimed_bytes=bytes_of(evicted) if evicted else 0,
        wait_ms=chosen.wait_ms if chosen is not None else 0.0,
        cold_load=ask.cold,
        fingerprint=ask.fingerprint,
    )


def cold_load_estimate_ms(envelope: ModelEnvelope, state: AcceleratorState, policy: SchedulerPolicy) -> float:
    """How long a cold load on `state`'s node is expected to take: the measured load, plus fetching
    the artifact set from the bucket where the node does not hold it."""
    if not envelope.artifact_set_id or envelope.artifact_set_id in state.cached_sets:
        return envelope.cold_load_ms
    return envelope.cold_load_ms + envelope.artifact_bytes * 1000.0 / policy.artifact_fetch_bytes_per_s


def _soonest_loaded(ask: Ask, assessments: list[Assessment]) -> list[Assessment]:
    """Of the accelerators a cold load fits as is, those it is expected to finish on soonest
    (locality); all of them when it fits on none, or for a warm request."""
    if not ask.cold:
        return assessments
    fitting = [(cold_load_estimate_ms(ask.envelope, a.state, ask.policy), a) for a in assessments if a.fits]
    if not fitting:
        return assessments
    soonest = min(estimate for estimate, _ in fitting)
    return [a for estimate, a in fitting if estimate == soonest]


def _conclude(ask: Ask, assessments: list[Assessment]) -> PlacementDecision:
    """Pick the winner among assessed accelerators (given in id order), or wait, or refuse."""
    kind = _COLD_LOAD if ask.cold else _RESIDENT_WARM
    best = _best_fit(ask, _soonest_loaded(ask, assessments))
    if best is not None:
        reasons = (kind, _ATTRIBUTION_UNKNOWN) if best.budget.attribution is _UNKNOWN else (kind,)
        return _decision(ask, _ADMIT, reasons, best)
    # Plan evictions only when nothing fits as is (best fit needs no eviction at all), and on an
    # accelerator only while its cost floor could still beat the cheapest plan found so far:
    # the winner is the first accelerator (in id order) with the least (cost, headroom after).
    cheapest: Assessment | None = None
    best_key: tuple[tuple[int, float, int], int] | None = None
    planned = []
    for item in assessments:
        if item.pending and (best_key is None or not cannot_beat(ask, item, best_key)):
            item = plan_evictions(ask, item)
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
        # A wait that ends in time first: a pressure that cannot fall before the deadline is no way.
        best = max(waitable, key=lambda item: (_in_time(ask, item), item.budget.schedulable_bytes))
        if R.PRESSURE_CRITICAL not in best.reasons or _in_time(ask, best):
            return _queue(ask, best, best.reasons)
        return _refuse(ask, assessments, best)
    return _refuse(ask, assessments, None)


def _refuse(ask: Ask, assessments: list[Assessment], outrun: Assessment | None) -> PlacementDecision:
    """REJECT_INSUFFICIENT_CAPACITY, naming the closest accelerator, or ``outrun``: the one whose
    pressure would have let the load in, but not before the request's deadline (DEADLINE_EXCEEDED)."""
    closest = (
        outrun if outrun is not None else max(assessments, key=lambda item: item.budget.schedulable_bytes)
    )
    # The first reason is the client's error: critical pressure, or a load that just failed there,
    # when it is what keeps every accelerator out; else the lack of room.
    first = R.INSUFFICIENT_SCHEDULABLE_VRAM
    for only in (R.PRESSURE_CRITICAL, R.RESIDENCY_LOAD_FAILED):
        if all(only in item.reasons for item in assessments):
            first = only
    refusals = [first, R.DEADLINE_EXCEEDED] if outrun is not None else [first]
    for item in assessments:
        refusals.extend(item.reasons)
    unique = tuple(dict.fromkeys(refusals))  # accelerators refused for the same reason: name it once
    return _decision(ask, Verdict.REJECT_INSUFFICIENT_CAPACITY, unique, closest)


def _best_fit(ask: Ask, assessments: list[Assessment]) -> Assessment | None:
    """The accelerator to use as is (``_preference``); the first in id order on a tie.  ``None``
    if it fits nowhere as is."""
    best: Assessment | None = None
    least = (0, 0)
    for item in assessments:
        if item.fits:
            key = _preference(ask, item)
            if best is None or key < least:
                best, least = item, key
    return best


def _preference(ask: Ask, item: Assessment) -> tuple[int, int]:
    """Smaller is better.  Warm: the copy serving the fewest requests, then the most headroom.
    Cold: the least headroom left (binpack), or the most (spread)."""
    if not ask.cold:
        return (leases_of(item.state, ask.envelope.deployment_id), -item.headroom_after)
    return (0, -item.headroom_after if ask.envelope.spread else item.headroom_after)


def _in_time(ask: Ask, waiting: Assessment) -> bool:
    """Whether the least wait on ``waiting``, then the cold load, can end before the request's
    deadline and within the policy's longest queue wait."""
    deadline = ask.request.deadline_ms
    work_ms = ask.envelope.cold_load_ms if ask.cold else 0.0
    if waiting.wait_ms >= ask.policy.max_queue_wait_seconds * 1000.0:
        return False
    return deadline is None or deadline > waiting.wait_ms + work_ms


def _queue(ask: Ask, waiting: Assessment, reasons: tuple[ReasonCode, ...]) -> PlacementDecision:
    """QUEUE on ``waiting`` — if the deadline and the global queue allow it."""
    policy = ask.policy
    if not _in_time(ask, waiting):
        return _decision(ask, Verdict.REJECT_DEADLINE, (R.DEADLINE_EXCEEDED, *reasons), waiting)
    if not ask.request.queued and ask.request.queue_depth >= policy.global_queue_limit:
        return _decision(ask, Verdict.REJECT_QUEUE_FULL, (R.QUEUE_FULL, *reasons), waiting)
    return _decision(ask, Verdict.QUEUE, reasons, waiting)
