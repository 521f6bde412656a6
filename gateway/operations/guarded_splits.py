"""Which splits the rollback guards judge, and what they find: pure, over the live catalogue and
the fleet's outcomes (`gateway.operations.fleet_outcomes` follows them, `gateway.deployments.guard`
judges them).

A split is judged while an experiment holds a share of it under a rollback policy; it is judged
on the outcomes since it began (the time of the `RoutingWeightsChanged` that set it, the same for
every replica): a canary resumed after a rollback starts with a clean window."""

from __future__ import annotations

from collections.abc import Collection, Mapping

import msgspec

from gateway.deployments.guard import judge
from gateway.serving.outcomes import OutcomeLog
from gateway.state.catalog import Catalog
from streams.events import releases as r


class GuardedSplit(msgspec.Struct, frozen=True):
    """A capability's split with experiments under guard: what the fleet's outcomes are followed
    for. A change to any of it (the weights, a guard's window) starts the following again."""

    stable_id: str
    capability: str
    split: frozenset[tuple[str, int]]
    guarded: tuple[str, ...]  # the experiments holding a share under a rollback policy, by id
    window_s: float  # the longest window of their guards: how far back the outcomes are needed

    @property
    def deployments(self) -> frozenset[str]:
        return frozenset((self.stable_id, *self.guarded))


def guarded_splits(catalog: Catalog) -> dict[str, GuardedSplit]:
    """stable deployment id -> its split, for each capability with an experiment under guard."""
    found = {}
    for stable in catalog.deployments.values():
        if stable.channel != "stable" or not stable.weights:
            continue
        guarded: list[str] = []
        windows: list[float] = []
        for experiment_id, weight in sorted(stable.weights.items()):
            experiment = catalog.deployments.get(experiment_id)
            if weight == 0 or experiment is None or experiment.rollback is None:
                continue
            if experiment_id == stable.deployment_id or not experiment.rollback.guards:
                continue
            guarded.append(experiment_id)
            windows.extend(guard.window_s for guard in experiment.rollback.guards)
        if guarded:
            found[stable.deployment_id] = GuardedSplit(
                stable.deployment_id,
                stable.capability,
                frozenset(stable.weights.items()),
                tuple(guarded),
                max(windows),
            )
    return found


def tripped_guards(
    catalog: Catalog,
    outcomes: OutcomeLog,
    now: float,
    began: Mapping[GuardedSplit, float],
    fresh: Collection[str] | None = None,
) -> list[tuple[str, r.GuardTrip]]:
    """(stable deployment id, trip) for each experiment under guard whose guard trips now. Only
    splits whose beginning is known (`began`: the fleet's outcomes are followed for them) are
    judged; with `fresh`, only experiments among those (new outcomes of their own: what moves
    their figures most, and the stable deployment's many outcomes are not judged each)."""
    trips = []
    for split in guarded_splits(catalog).values():
        since = began.get(split)
        if since is None:
            continue
        for experiment_id in split.guarded:
            experiment = catalog.deployments[experiment_id]
            if experiment.rollback is None or (fresh is not None and experiment_id not in fresh):
                continue
            trip = judge(
                experiment.rollback,
                experiment_id,
                outcomes.of(experiment_id),
                outcomes.of(split.stable_id),
                now,
                since,
            )
            if trip is not None:
                trips.append((split.stable_id, trip))
    return trips
