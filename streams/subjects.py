"""Subject names: the only place that knows how subjects are spelled.

Every id that becomes a subject token is validated here, so a wildcard or a dot in an id
can never widen a subscription or land an event on another aggregate's subjects.
"""

from __future__ import annotations

import functools
import re
from enum import StrEnum

EVENTS_STREAM = "MF_EVENTS"
REQUESTS_STREAM = "MF_REQUESTS"
WORK_STREAM = "MF_WORK"
TELEMETRY_STREAM = "MF_TELEMETRY"
# The JetStream Object Store bucket holding every imported artifact file, by its sha256; its stream
# is OBJ_<bucket> and its subjects $O.<bucket>.C.> (chunks) and $O.<bucket>.M.> (object meta).
ARTIFACTS_BUCKET = "MF_ARTIFACTS"
ARTIFACTS_STREAM = f"OBJ_{ARTIFACTS_BUCKET}"
# The KV bucket holding snapshots of the gateways' live view (gateway/state/snapshot.py): its stream
# is KV_<bucket>; one key, the latest verified snapshot.
SNAPSHOTS_BUCKET = "MF_SNAPSHOTS"
SNAPSHOTS_STREAM = f"KV_{SNAPSHOTS_BUCKET}"
PROJECTED_STREAMS = (EVENTS_STREAM, REQUESTS_STREAM)  # what the projector applies to the read model

EVENTS_PREFIX = "mf.evt"
REQUESTS_PREFIX = "mf.req"
WORK_PREFIX = "mf.job"
INVOKE_PREFIX = "mf.invoke"
TELEMETRY_PREFIX = "mf.tel"
QUEUE_DEPTH_PREFIX = "mf.queue"  # core NATS: each gateway replica's requests waiting for capacity
AGENT_METRICS_PREFIX = "mf.metrics"  # core NATS: each agent's metrics snapshot, with its telemetry
ALIVE_PREFIX = "mf.alive"  # core NATS request-reply: a gateway asks whether a node's agent is connected

MAX_TOKEN_LENGTH = 128
_TOKEN = re.compile(r"^[A-Za-z0-9_\-=~]+$")


class Aggregate(StrEnum):
    """Aggregate types of the control plane; each owns `mf.evt.<type>.<id>.*`."""

    CAPABILITY = "capability"
    ARTIFACT_SET = "artifactset"
    NODE = "node"
    CANDIDATE = "candidate"
    APPROVAL = "approval"
    DEPLOYMENT = "deployment"
    ACCELERATOR = "accelerator"
    CLIENT = "client"
    PROJECT = "project"
    SCHEDULER_POLICY = "policy"


# Subjects the gateway builds for every request, from a few names: each name is checked once.
_per_request = functools.lru_cache(maxsize=4096)


class InvalidSubjectToken(ValueError):
    """An id that cannot be a subject token (empty, too long, wildcard, dot, space)."""

    code = "INVALID_IDENTIFIER"


def token(value: str, what: str = "id") -> str:
    """Return `value` if it is safe as one subject token, else raise InvalidSubjectToken."""
    if not value or len(value) > MAX_TOKEN_LENGTH or not _TOKEN.match(value):
        raise InvalidSubjectToken(
            f"{what} {value!r} is not a valid identifier: use 1-{MAX_TOKEN_LENGTH} characters "
            "from letters, digits, '_', '-', '=', '~' (no dots, spaces or wildcards)"
        )
    return value


def aggregate_type(value: str) -> Aggregate:
    try:
        return Aggregate(value)
    except ValueError:
        known = ", ".join(a.value for a in Aggregate)
        raise InvalidSubjectToken(f"unknown aggregate type {value!r}; known: {known}") from None


def capability_token(capability: str) -> str:
    """`rag.embedding@1` -> `rag_embedding_v1` (dots would split the subject)."""
    name, _, version = capability.partition("@")
    return token(name.replace(".", "_") + (f"_v{version}" if version else ""), "capability")


def event_subject(aggregate: Aggregate, aggregate_id: str, event_type: str) -> str:
    return f"{EVENTS_PREFIX}.{aggregate.value}.{token(aggregate_id)}.{token(event_type, 'event type')}"


def aggregate_filter(aggregate: Aggregate, aggregate_id: str) -> str:
    """The subjects one aggregate instance owns: the optimistic-concurrency scope."""
    return f"{EVENTS_PREFIX}.{aggregate.value}.{token(aggregate_id)}.*"


def aggregate_type_filter(aggregate: Aggregate | None = None, event_type: str | None = None) -> str:
    agg = aggregate.value if aggregate else "*"
    evt = token(event_type, "event type") if event_type else "*"
    return f"{EVENTS_PREFIX}.{agg}.*.{evt}"


@_per_request
def request_subject(capability: str, event_type: str) -> str:
    return f"{REQUESTS_PREFIX}.{capability_token(capability)}.{token(event_type, 'event type')}"


def job_subject(node_id: str, deployment_id: str, op: str) -> str:
    node, deployment = token(node_id, "node id"), token(deployment_id, "deployment id")
    return f"{WORK_PREFIX}.{node}.{deployment}.{token(op, 'op')}"


def node_jobs_filter(node_id: str) -> str:
    return f"{WORK_PREFIX}.{token(node_id, 'node id')}.>"


@_per_request
def invoke_subject(node_id: str, deployment_id: str) -> str:
    return f"{INVOKE_PREFIX}.{token(node_id, 'node id')}.{token(deployment_id, 'deployment id')}"


# A node's NATS user may publish events for the accelerators whose ids it would give them: the CPU
# device and this many GPUs (deploy/nats/nats.conf lists them; a GPU past the last is refused).
MAX_GPUS_PER_NODE = 16


def accelerator_id(node_id: str, kind: str, index: int) -> str:
    """`node-1-gpu0`: an accelerator's id names its node, so the node's permissions can list it."""
    return token(f"{node_id}-{kind}{index}", "accelerator id")


def node_inbox_prefix(public_key: str) -> str:
    """The reply subjects of a connection that signs in with this nkey: its user may read these
    alone, so it never reads the replies other nodes (or gateways) receive."""
    return f"_INBOX.{token(public_key, 'public key')}"


def telemetry_subject(node_id: str, accelerator_id: str) -> str:
    return f"{TELEMETRY_PREFIX}.{token(node_id, 'node id')}.{token(accelerator_id, 'accelerator id')}"


def agent_metrics_subject(node_id: str) -> str:
    return f"{AGENT_METRICS_PREFIX}.{token(node_id, 'node id')}"


def alive_subject(node_id: str) -> str:
    """Where a node's agent answers "are you there?": only its connection subscribes it, so NATS's
    no-responders answer says that connection is gone."""
    return f"{ALIVE_PREFIX}.{token(node_id, 'node id')}"


def parse_event_subject(subject: str) -> tuple[str, str, str] | None:
    """`mf.evt.<aggregate>.<id>.<EventType>` -> (aggregate, id, event type); None if not one."""
    parts = subject.split(".")
    if len(parts) != 5 or f"{parts[0]}.{parts[1]}" != EVENTS_PREFIX:
        return None
    return parts[2], parts[3], parts[4]


# ---- client limits (gateway.clients.limits) -------------------------------------------------
# Counters and slots shared by every gateway replica; never events, never request content.

LIMITS_RATE_STREAM = "MF_LIMITS_RATE"
LIMITS_CONCURRENCY_STREAM = "MF_LIMITS_CONC"
LIMIT_RATE_PREFIX = "mf.limit.rate"
LIMIT_CONCURRENCY_PREFIX = "mf.limit.conc"
LIMIT_FREED_PREFIX = "mf.limit.freed"  # core NATS: a slot was let go


def rate_window_subject(client_id: str, window: int) -> str:
    """The request counter of one client for one minute window (`window` = epoch minute)."""
    return f"{LIMIT_RATE_PREFIX}.{token(client_id, 'client id')}.{int(window)}"


@_per_request
def client_slots(client_id: str) -> str:
    """The group of a client's `max_concurrency` slots (`slot_subject` names each)."""
    return f"{LIMIT_CONCURRENCY_PREFIX}.{token(client_id, 'client id')}"


def deployment_slots(deployment_id: str, kind: str) -> str:
    """The group of a deployment's slots: `run` (its `max_concurrency`) or `wait` (its
    `max_queue_depth`). One token more than a client's group, so neither filter matches the other."""
    return f"{LIMIT_CONCURRENCY_PREFIX}.deployment.{token(deployment_id, 'deployment id')}.{token(kind, 'slot kind')}"


def slot_subject(group: str, slot: int) -> str:
    """One slot of a group; a message on it means the slot is held."""
    return f"{group}.{int(slot)}"


def slots_filter(group: str) -> str:
    return f"{group}.*"


def concurrency_slot_subject(client_id: str, slot: int) -> str:
    """One of a client's `max_concurrency` slots."""
    return slot_subject(client_slots(client_id), slot)


def slot_freed_subject(group: str) -> str:
    """Core NATS: a holder of one of the group's slots let it go (those waiting for one try again)."""
    return f"{LIMIT_FREED_PREFIX}.{group.removeprefix(LIMIT_CONCURRENCY_PREFIX + '.')}"


def queue_depth_subject(gateway_id: str) -> str:
    return f"{QUEUE_DEPTH_PREFIX}.{token(gateway_id, 'gateway id')}"
