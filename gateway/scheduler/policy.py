"""Scheduler policy: every tunable the pure scheduler reads, with operator-sane defaults.

A policy is a value. Operators revise it through the ``scheduler policy`` aggregate
(``SchedulerPolicyRevised``); the revision number travels into every decision fingerprint,
so a decision can always be traced to the policy it was made under.
"""

from __future__ import annotations

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

    # No new eviction on an accelerator until this long after its last one.
    eviction_cooldown_seconds: float = 30.0

    # Bounded waiting.
    global_queue_limit: int = 64
    max_queue_wait_seconds: float = 30.0

    # A requested load no agent reported on (loaded or failed) within this long is ended on the
    # books as failed; generous, since building a TensorRT engine can take many minutes.
    load_timeout_seconds: float = 1800.0
    # An eviction's victim no agent reported unloaded within this long goes back on the books.
    unload_timeout_seconds: float = 300.0

    # Telemetry older than this makes attribution UNKNOWN.
    telemetry_fresh_seconds: float = 10.0
    # Refuse to cold-load onto an accelerator whose memory we cannot currently attribute.
    cold_load_requires_known_attribution: bool = True


DEFAULT_POLICY = SchedulerPolicy()
