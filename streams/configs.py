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


def artifacts_stream(replicas: int = 1) -> StreamConfig:
    # The artifact bucket's stream, as nats-py's create_object_store makes one (chunks and meta
    # subjects, rollup for meta, direct gets), provisioned with the others so it is replicated like
    # them. Objects are named by their sha256 and never replaced, so nothing here is deleted.
    bucket = subjects.ARTIFACTS_BUCKET
    return StreamConfig(
        name=subjects.ARTIFACTS_STREAM,
        description="ModelForge artifact files by sha256 (a JetStream Object Store bucket)",
        subjects=[f"$O.{bucket}.C.>", f"$O.{bucket}.M.>"],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        num_replicas=replicas,
        discard=DiscardPolicy.NEW,
        allow_rollup_hdrs=True,
        allow_direct=True,
        deny_delete=True,
    )


def snapshots_stream(replicas: int = 1) -> StreamConfig:
    # A KV bucket as nats-py's create_key_value makes one (history 1, direct gets, rollups), provisioned
    # with the others so it is replicated like them. Derived state: losing it costs one full fold.
    bucket = subjects.SNAPSHOTS_BUCKET
    return StreamConfig(
        name=subjects.SNAPSHOTS_STREAM,
        description="ModelForge snapshots of the gateways' live view (a JetStream KV bucket)",
        subjects=[f"$KV.{bucket}.>"],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        num_replicas=replicas,
        max_msgs_per_subject=1,
        discard=DiscardPolicy.NEW,
        allow_rollup_hdrs=True,
        allow_direct=True,
        deny_delete=True,
    )


def all_streams(replicas: int = 1, request_max_age_days: float = 30.0) -> list[StreamConfig]:
    return [
        events_stream(replicas),
        requests_stream(request_max_age_days, replicas),
        work_stream(replicas),
        telemetry_stream(replicas),
        artifacts_stream(replicas),
        snapshots_stream(replicas),
    ]


# ---- client limits: shared by every gateway replica (gateway.clients.limits) --------------------
# Memory storage: they are counters and leases, not history; a server restart forgets them.

RATE_WINDOW_KEEP_S = 180.0  # a minute window's counter is read only during that minute


def limits_rate_stream(replicas: int = 1) -> StreamConfig:
    # Distributed counters (nats-server >= 2.12, `Nats-Incr`): one atomic increment per request.
    # A counter stream cannot carry per-message TTLs, so old windows age out by max_age.
    return StreamConfig(
        name=subjects.LIMITS_RATE_STREAM,
        description="ModelForge per-client request counters per minute window",
        subjects=[f"{subjects.LIMIT_RATE_PREFIX}.>"],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.MEMORY,
        num_replicas=replicas,
        max_age=RATE_WINDOW_KEEP_S,
        max_msgs_per_subject=1,
        allow_direct=True,
        allow_msg_counter=True,
    )


def limits_concurrency_stream(replicas: int = 1) -> StreamConfig:
    # One message per held slot, created with an expected subject sequence of 0 (at most one holder)
    # and a per-message TTL so a crashed gateway's slot frees itself; renewal replaces the message.
    return StreamConfig(
        name=subjects.LIMITS_CONCURRENCY_STREAM,
        description="ModelForge per-client concurrency slots (held while a request runs)",
        subjects=[f"{subjects.LIMIT_CONCURRENCY_PREFIX}.>"],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.MEMORY,
        num_replicas=replicas,
        max_msgs_per_subject=1,
        discard=DiscardPolicy.OLD,
        allow_msg_ttl=True,
    )


def limit_streams(replicas: int = 1) -> list[StreamConfig]:
    return [limits_rate_stream(replicas), limits_concurrency_stream(replicas)]
