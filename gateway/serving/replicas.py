"""Replicas: when the residency upkeep loads a further copy of a deployment, and which idle copies
beyond its `replicas.min` it unloads — pure decisions on the live view.

- a deployment's `resident_floor` (`replicas.min` for an always-warm one or one asking for more
  than one copy) is kept loaded: `upkeep.warm_missing` names those short of it;
- a deployment whose requests running on its copies (their leases) and waiting in this replica's
  line reach `replica_scale_up_queue_depth` per loaded copy gets one more, up to `replicas.max`,
  one load at a time, where room exists without evicting anything;
- a loaded copy beyond `max(replicas.min, 1)` that has served nothing for `replica_idle_seconds`
  is unloaded (the longest idle first), so the copies shrink back once the pressure is gone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gateway.deployments.model import DeploymentState
from gateway.scheduler import AcceleratorState, ResidencyState, Resident, SchedulerPolicy
from gateway.serving.upkeep import Unload
from gateway.state.catalog import Catalog

_LOADED = ResidencyState.LOADED
_LOADING = ResidencyState.LOADING


def copies_of(
    accelerators: Iterable[AcceleratorState], deployment_id: str
) -> list[tuple[AcceleratorState, Resident]]:
    """The deployment's loaded and loading copies, with the accelerator each is on."""
    return [
        (state, r)
        for state in accelerators
        for r in state.residents
        if r.deployment_id == deployment_id and r.state in (_LOADED, _LOADING)
    ]


def _routable(catalog: Catalog, deployment: DeploymentState) -> bool:
    return deployment.active and not deployment.draining and catalog.unservable(deployment) is None


def wanting_more(
    catalog: Catalog,
    accelerators: Iterable[AcceleratorState],
    policy: SchedulerPolicy,
    waiting: Mapping[str, int],
) -> list[str]:
    """Deployments under queue pressure that may have another copy, in id order. `waiting`: this
    replica's line, by deployment id (the leases on the books count every replica's running ones)."""
    accelerators = list(accelerators)
    out = []
    for deployment in catalog.deployments.values():
        if deployment.replicas.max <= 1 or not _routable(catalog, deployment):
            continue
        copies = copies_of(accelerators, deployment.deployment_id)
        loaded = [r for _, r in copies if r.state is _LOADED]
        if not loaded or len(loaded) < len(copies) or len(copies) >= deployment.replicas.max:
            continue  # none to relieve, one already on its way, or as many as allowed
        demand = sum(r.active_leases for r in loaded) + waiting.get(deployment.deployment_id, 0)
        if demand >= policy.replica_scale_up_queue_depth * len(loaded):
            out.append(deployment.deployment_id)
    return sorted(out)


def idle_extras(
    catalog: Catalog, accelerators: Iterable[AcceleratorState], policy: SchedulerPolicy, now: float
) -> list[Unload]:
    """Loaded copies beyond `max(replicas.min, 1)` idle for `replica_idle_seconds`, longest idle
    first; a copy still loading counts toward the copies kept."""
    accelerators = list(accelerators)
    out: list[Unload] = []
    for deployment in catalog.deployments.values():
        copies = copies_of(accelerators, deployment.deployment_id)
        extra = len(copies) - max(deployment.replicas.min, 1)
        idle = sorted(
            (
                (r.last_used_at, state.accelerator_id, state.node_id)
                for state, r in copies
                if r.state is _LOADED
                and r.active_leases == 0
                and r.last_used_at + policy.replica_idle_seconds <= now
            )
        )
        out.extend(Unload(acc, node, deployment.deployment_id) for _, acc, node in idle[: max(extra, 0)])
    return out


def next_idle_extra_due(
    catalog: Catalog, accelerators: Iterable[AcceleratorState], policy: SchedulerPolicy
) -> float | None:
    """When the next idle copy beyond the kept ones reaches `replica_idle_seconds` (None: none)."""
    accelerators = list(accelerators)
    times = [
        r.last_used_at + policy.replica_idle_seconds
        for deployment in catalog.deployments.values()
        if len(copies := copies_of(accelerators, deployment.deployment_id)) > max(deployment.replicas.min, 1)
        for _, r in copies
        if r.state is _LOADED and r.active_leases == 0
    ]
    return min(times) if times else None
