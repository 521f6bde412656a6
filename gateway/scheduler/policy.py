"""Scheduler policy: every tunable the pure scheduler reads, with operator-sane defaults.

A policy is a value. Operators revise it through the ``scheduler policy`` aggregate
(``SchedulerPolicyRevised``); the revision number travels into every decision fingerprint,
so a decision can always be traced to the policy it was made under.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import msgspec

MIB = 1024 * 1024
GIB = 1024 * MIB


class SchedulerPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """Tunables for accounting, pressure, eviction and queueing.

    Byte sizes are integers; fractions are in ``[0, 1]``; durations are seconds.
    """

    revision: int = 0

    # Safety reserve: VRAM never handed out, for allocator fragmentation, CUDA context growth
    # and processes we cannot see yet.  reserve = max(min bytes, fraction x total).
    safety_reserve_min_bytes: int = 1 * GIB
    safety_reserve_fraction: float = 0.05

    # Cold-load sizing: required = max(measured required, peak + margin) where
    # margin = runtime margin + max(cold-load margin min bytes, fraction x peak).
    runtime_margin_bytes: int = 256 * MIB
    cold_load_margin_min_bytes: int = 512 * MIB
    cold_load_margin_fraction: float = 0.10

    # A request against a model that is already resident still needs working memory.
    # (A floor, not the estimate: probes measure each model's own per-request working memory.)
    request_execution_floor_bytes: int = 64 * MIB

    # Pressure levels by utilisation (committed / total).
    pressure_elevated_at: float = 0.70
    pressure_high_at: float = 0.85
    pressure_critical_at: float = 0.95
    # Pressure falls only after the lower level has held this long.
    pressure_stable_seconds: float = 30.0

    # No new eviction by placement on an accelerator until this long after its last one, or after a
    # model last finished loading there: the least a swapped-in model stays (unloads that make room
    # for nobody, an operator's or a keep-warm TTL's, neither wait nor count).
    eviction_cooldown_seconds: float = 30.0

    # Bounded waiting.
    global_queue_limit: int = 64
    max_queue_wait_seconds: float = 30.0
    # Models contending for one accelerator take turns: a request that has waited this long for
    # another model's leases to end there makes later requests stop taking it, so that model
    # drains and can be swapped out (gateway/serving/line.py). Zero: turns at once.
    fairness_window_seconds: float = 2.0

    # A requested load no agent reported on (loaded or failed) within this long is ended on the
    # books as failed; generous, since building a TensorRT engine can take many minutes.
    load_timeout_seconds: float = 1800.0
    # An eviction's victim no agent reported unloaded within this long goes back on the books.
    unload_timeout_seconds: float = 300.0

    # Replicas: a deployment's further copy (up to its `replicas.max`) is loaded once its requests
    # running or waiting reach this many per copy; a copy beyond `replicas.min` idle this long is
    # unloaded by the residency upkeep.
    replica_scale_up_queue_depth: int = 8
    replica_idle_seconds: float = 60.0

    # Telemetry older than this makes attribution UNKNOWN.
    telemetry_fresh_seconds: float = 10.0
    # Refuse to cold-load onto an accelerator whose memory we cannot currently attribute.
    cold_load_requires_known_attribution: bool = True
    # What a node fetching an artifact set from the bucket is expected to manage: a cold load on a
    # node without the set counts its fetch (set bytes / this) on top of the measured load.
    artifact_fetch_bytes_per_s: float = 100e6

    # Lab-channel work (experiments and candidates, not the stable deployment) is refused
    # LAB_PAUSED while true: an operator's switch to keep the accelerators for production.
    lab_paused: bool = False


DEFAULT_POLICY = SchedulerPolicy()


# ---- revising the policy -------------------------------------------------------------------------

_BYTES = ("safety_reserve_min_bytes", "runtime_margin_bytes", "cold_load_margin_min_bytes",
          "request_execution_floor_bytes")  # fmt: skip
_FRACTIONS = ("safety_reserve_fraction", "cold_load_margin_fraction")
_PRESSURE = ("pressure_elevated_at", "pressure_high_at", "pressure_critical_at")
_WAITS = (
    "pressure_stable_seconds",
    "eviction_cooldown_seconds",
    "fairness_window_seconds",
    "replica_idle_seconds",
)  # zero: no waiting
_TIMEOUTS = ("max_queue_wait_seconds", "load_timeout_seconds", "unload_timeout_seconds",
             "telemetry_fresh_seconds")  # fmt: skip
SETTINGS = {name: type(getattr(DEFAULT_POLICY, name)) for name in SchedulerPolicy.__struct_fields__}
del SETTINGS["revision"]


class PolicyInvalid(ValueError):
    """A revision the scheduler cannot run under, naming the setting at fault."""

    def __init__(self, setting: str, message: str) -> None:
        super().__init__(message)
        self.setting, self.message = setting, message


def policy_of(settings: Mapping[str, float], revision: int) -> SchedulerPolicy:
    """Stored settings (numbers; a boolean as 0 or 1) over the defaults; unknown names ignored."""
    known = {
        name: bool(value) if SETTINGS[name] is bool else value
        for name, value in settings.items()
        if name in SETTINGS
    }
    fields = {**msgspec.structs.asdict(DEFAULT_POLICY), **known, "revision": revision}
    return msgspec.convert(fields, SchedulerPolicy, strict=False)


def revise(settings: Mapping[str, float], changes: Mapping[str, float | bool]) -> dict[str, float]:
    """The stored settings with `changes` applied; PolicyInvalid names the first setting that is
    unknown, of the wrong kind, or leaves a policy the scheduler cannot keep its promises under
    (a negative reserve would hand out more memory than the card has)."""
    merged = dict(settings)
    for name, value in sorted(changes.items()):
        merged[name] = _stored(name, value)
    problem = policy_problem(policy_of(merged, 0))
    if problem is not None:
        raise PolicyInvalid(*problem)
    return merged


def _stored(name: str, value: float | bool) -> float:
    kind = SETTINGS.get(name)
    if kind is None:
        raise PolicyInvalid(name, f"unknown policy setting {name!r}")
    if kind is bool:
        if not isinstance(value, bool):
            raise PolicyInvalid(name, f"`{name}` is true or false, got {value!r}")
        return float(value)
    if isinstance(value, bool) or not math.isfinite(value):
        raise PolicyInvalid(name, f"`{name}` must be a finite number, got {value!r}")
    if kind is int and not float(value).is_integer():
        raise PolicyInvalid(name, f"`{name}` must be a whole number, got {value!r}")
    return float(value)


def policy_problem(policy: SchedulerPolicy) -> tuple[str, str] | None:
    """(setting, why) for the first setting out of its range, or None."""
    for name in _BYTES:
        if getattr(policy, name) < 0:
            return name, f"`{name}` must not be negative"
    for name in _FRACTIONS:
        if not 0 <= getattr(policy, name) <= 1:
            return name, f"`{name}` is a fraction between 0 and 1"
    levels = [getattr(policy, name) for name in _PRESSURE]
    for index, name in enumerate(_PRESSURE):
        below = levels[index - 1] if index else 0.0
        if not below < levels[index] <= 1:
            return name, (
                f"`{name}` must be above {_PRESSURE[index - 1] if index else '0'} and at most 1"
                " (elevated < high < critical)"
            )
    for name in _WAITS:
        if getattr(policy, name) < 0:
            return name, f"`{name}` must not be negative"
    for name in _TIMEOUTS:
        if getattr(policy, name) <= 0:
            return name, f"`{name}` must be positive"
    if policy.artifact_fetch_bytes_per_s <= 0:
        return "artifact_fetch_bytes_per_s", "`artifact_fetch_bytes_per_s` must be positive"
    for name in ("global_queue_limit", "replica_scale_up_queue_depth"):
        if getattr(policy, name) < 1:
            return name, f"`{name}` must be at least 1"
    return None
