"""Canary release events on the deployment aggregate: a capability's routing weights (appended on
its stable deployment, so every change to one capability's split is ordered by one aggregate's
version) and an experiment's rollback policy (appended on the experiment).

A guard that trips records its measurement in the weights change that takes the experiment's
share back (`RoutingWeightsChanged.guard`): the event says why."""

from __future__ import annotations

from typing import Literal

import msgspec

from streams.events.base import Event

GuardKind = Literal["error_rate", "p95_latency_ms", "invalid_output_count"]
OnTrip = Literal["pause", "unload"]


class RollbackGuard(msgspec.Struct, frozen=True, kw_only=True):
    """Trips when the experiment's figure over the last `window_s` exceeds the stable deployment's
    over the same window by more than `threshold`: error rate in fraction points (0.05 = five
    points), p95 latency in milliseconds, INVALID_OUTPUT answers in requests. The rate and the
    latency need `min_requests` outcomes on each side before they judge; the count needs none."""

    kind: GuardKind
    threshold: float
    window_s: float = 300.0
    min_requests: int = 20


class RollbackPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """What takes an experiment's traffic back: any guard tripping; then `unload` (the reference's
    `unload_experiment`: weight 0, deactivated, unloaded) or `pause` (weight 0, kept loaded)."""

    guards: tuple[RollbackGuard, ...] = ()
    on_trip: OnTrip = "unload"


class GuardTrip(msgspec.Struct, frozen=True, kw_only=True):
    """The measurement that tripped a guard: the experiment's figure, the stable's, over how many
    outcomes of each (the whole fleet's, as the replica that recorded it followed them)."""

    experiment_id: str
    guard: RollbackGuard
    observed: float
    baseline: float
    experiment_requests: int
    stable_requests: int


class RoutingWeightsChanged(Event, frozen=True):
    deployment_id: str  # the capability's stable deployment: the aggregate that orders its splits
    capability: str
    weights: dict[str, int]  # deployment id -> weight (percent); they sum to 100
    sticky: bool = False  # the same client always lands on the same deployment (hash of its id)
    reason: str = ""
    guard: GuardTrip | None = None  # set when a rollback guard took an experiment's share back


class RollbackPolicyChanged(Event, frozen=True):
    deployment_id: str  # the experiment
    policy: RollbackPolicy
