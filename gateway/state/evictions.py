"""Evictions under way: planned on the books, their victims not all unloaded yet. Pure.

An `EvictionPlanned` marks its victims UNLOADING; each victim's `ResidencyUnloaded` credits what
it gave back. Once no victim is still unloading (unloaded, put back by a failed unload or an
unload job that could not be sent, or dropped by the agent's reconciliation after a restart), the
eviction has ended and `EvictionCompleted` records what it reclaimed, with outcome "failed" when no
victim was unloaded.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from gateway.scheduler import AcceleratorState, ResidencyState
from streams.events import serving as s
from streams.events.base import Event

_UNLOADING = ResidencyState.UNLOADING


class PendingEviction(msgspec.Struct, frozen=True):
    planned: s.EvictionPlanned
    reclaimed_bytes: int = 0
    unloaded: frozenset[str] = frozenset()  # victims whose unload was reported
    planned_at: float = 0.0  # POSIX seconds, when it was appended


def fold_evictions(pending: dict[str, PendingEviction], event: Event, at: float) -> None:
    """Apply one accelerator event that occurred at `at` to the evictions under way (in place: the
    live view's table)."""
    match event:
        case s.EvictionPlanned():
            pending[event.eviction_id] = PendingEviction(event, planned_at=at)
        case s.ResidencyUnloaded():
            victim = event.deployment_id
            for eviction_id, item in pending.items():
                planned = item.planned
                if (
                    planned.accelerator_id == event.accelerator_id
                    and victim in planned.victims
                    and victim not in item.unloaded  # each victim counts once
                ):
                    pending[eviction_id] = msgspec.structs.replace(
                        item,
                        reclaimed_bytes=item.reclaimed_bytes + event.reclaimed_bytes,
                        unloaded=item.unloaded | {victim},
                    )
        case s.EvictionCompleted():
            pending.pop(event.eviction_id, None)
        case _:
            pass


def unloads_pending(state: AcceleratorState | None, victims: set[str]) -> set[str]:
    """The victims still on their way out (an unload that failed puts its victim back to LOADED)."""
    if state is None:
        return set()
    return {r.deployment_id for r in state.residents if r.deployment_id in victims and r.state is _UNLOADING}


def evictions_ended(
    pending: Mapping[str, PendingEviction], accelerators: Mapping[str, AcceleratorState]
) -> list[s.EvictionCompleted]:
    """The completions to record: evictions none of whose victims is still unloading, by id."""
    return [
        s.EvictionCompleted(
            eviction_id=eviction_id,
            accelerator_id=item.planned.accelerator_id,
            reclaimed_bytes=item.reclaimed_bytes,
            outcome="completed" if item.unloaded else "failed",
        )
        for eviction_id, item in sorted(pending.items())
        if not unloads_pending(accelerators.get(item.planned.accelerator_id), set(item.planned.victims))
    ]


def unloads_overdue(
    pending: Mapping[str, PendingEviction],
    accelerators: Mapping[str, AcceleratorState],
    now: float,
    timeout_s: float,
) -> list[s.ResidencyUnloadFailed]:
    """Victims still unloading `timeout_s` after their eviction was planned (their job lost, their
    agent stuck): each goes back on the books, so the eviction ends."""
    out = []
    for item in sorted(pending.values(), key=lambda p: p.planned.eviction_id):
        planned = item.planned
        if item.planned_at + timeout_s > now:
            continue
        state = accelerators.get(planned.accelerator_id)
        for victim in sorted(unloads_pending(state, set(planned.victims))):
            out.append(
                s.ResidencyUnloadFailed(
                    accelerator_id=planned.accelerator_id,
                    deployment_id=victim,
                    code="GPU_MEMORY_NOT_RECLAIMED",
                    detail=f"no agent reported on the unload within {timeout_s:g} s",
                )
            )
    return out


def next_unload_due(pending: Mapping[str, PendingEviction], timeout_s: float) -> float | None:
    """When the next eviction under way runs out of time (None: none is under way)."""
    return min((item.planned_at + timeout_s for item in pending.values()), default=None)


def evicting_for(pending: Mapping[str, PendingEviction], deployment_id: str) -> bool:
    """Whether an eviction to make room for `deployment_id` is still under way."""
    return any(item.planned.for_deployment_id == deployment_id for item in pending.values())
