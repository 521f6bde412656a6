"""Stream configurations: what each stream keeps, for how long, and why.

Pure data; `eventstore.provision` applies it. Invoke subjects (`mf.invoke.>`) are deliberately
captured by no stream: request content must never be stored.
"""

from __future__ import annotations

from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig

from streams import subjects

MIN_SERVER_VERSION = (2, 12, 0)  # atomic batch publish arrived in 2.12
DUPLICATE_WINDOW_S = 120.0
DAY_S = 86_400.0
MAX_EVENT_BYTES = 256 * 1024


def events_stream(replicas: int = 1) -> StreamConfig:
    # The source of truth: kept forever, never deletable, atomic batches for multi-event commands.
    return StreamConfig(
        name=subjects.EVENTS_STREAM,
        description="ModelForge control-plane and scheduling events (source of truth)",
        subjects=[f"{subjects.EVENTS_PREFIX}.>"],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        num_replicas=replicas,
        max_msg_size=MAX_EVENT_BYTES,
        duplicate_window=DUPLICATE_WINDOW_S,
        deny_delete=True,
        deny_purge=True,
        allow_direct=True,
        allow_atomic=True,
        discard=DiscardPolicy.NEW,
    )


def requests_stream(max_age_days: float = 30.0, replicas: int = 1) -> StreamConfig:
    # High volume per-request history; bounded by age.
    return StreamConfig(
        name=subjects.REQUESTS_STREAM,
        description="ModelForge per-request events (hashes and timings, never content)",
        subjects=[f"{subjects.REQUESTS_PREFIX}.>"],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        num_replicas=replicas,
        max_msg_size=MAX_EVENT_BYTES,
        max_age=max_age_days * DAY_S,
        duplicate_window=DUPLICATE_WINDOW_S,
        allow_direct=True,
        allow_atomic=True,
    )


def work_stream(replicas: int = 1) -> StreamConfig:
    # Control jobs that must not be lost until a node agent acknowledges them.
    return StreamConfig(
        name=subjects.WORK_STREAM,
        description="ModelForge control jobs for node agents (load, unload, health, drain, probe)",
        subjects=[f"{subjects.WORK_PREFIX}.>"],
        retention=RetentionPolicy.WORK_QUEUE,
        storage=StorageType.MEMORY,
        num_replicas=replicas,
        max_msg_size=MAX_EVENT_BYTES,
        duplicate_window=DUPLICATE_WINDOW_S,
    )


def telemetry_stream(replicas: int = 1) -> StreamConfig:
    # Last value per (node, accelerator): the scheduler only needs the freshest observation.
    return StreamConfig(
        name=subjects.TELEMETRY_STREAM,
        description="ModelForge accelerator telemetry and agent liveness (last value per subject)",
        subjects=[f"{subjects.TELEMETRY_PREFIX}.>"],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        num_replicas=replicas,
        max_msgs_per_subject=1,
        allow_direct=True,
        allow_rollup_hdrs=False,
    )


def all_streams(replicas: int = 1, request_max_age_days: float = 30.0) -> list[StreamConfig]:
    return [
        events_stream(replicas),
        requests_stream(request_max_age_days, replicas),
        work_stream(replicas),
        telemetry_stream(replicas),
    ]
