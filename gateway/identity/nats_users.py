"""The NATS users of the fleet's nodes, rendered from their recorded identities into the server
configuration (deploy/nats/nats.conf) between two marker lines, so the file stays the one source
of every other role's permissions and re-rendering replaces only the nodes.

Each node's user (an nkey) may read only its own invokes and job consumer and its own reply
inbox, and publish events only for its node and the accelerators whose ids name it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping

import msgspec

from streams import subjects
from streams.events.base import Event
from streams.events.control import (
    ArtifactSetFetchProgressed,
    ArtifactSetRegistered,
    ArtifactSetVerificationFailed,
    ArtifactSetVerified,
    NodeRegistered,
    ProbeCompleted,
    ProbeFailed,
    WorkerStarted,
)
from streams.events.identity import NodeCredentialsIssued, NodeCredentialsRevoked

BEGIN = "# BEGIN node users"
END = "# END node users"
_PUBLIC_KEY = re.compile(r"^U[A-Z2-7]{55}$")

# The node aggregate's events an agent appends (nodeagent/agent/registration.py); the rest of the
# node's history (cordons, losses, its credentials) is the gateway's and the operator's.
AGENT_NODE_EVENTS = (NodeRegistered.event_type(), WorkerStarted.event_type())
# Events an agent appends to aggregates that are not its node's own: a verify or probe job's
# outcome, a fetch's progress, and `models pull --register` run in the agent's container. By event
# type, not by aggregate: a node must never approve, promote, quarantine or revoke anything.
SHARED_EVENTS = (
    *(
        (subjects.Aggregate.ARTIFACT_SET, event.event_type())
        for event in (
            ArtifactSetRegistered,
            ArtifactSetVerified,
            ArtifactSetVerificationFailed,
            ArtifactSetFetchProgressed,
        )
    ),
    *((subjects.Aggregate.CANDIDATE, event.event_type()) for event in (ProbeCompleted, ProbeFailed)),
)


class NodeIdentity(msgspec.Struct, frozen=True):
    node_id: str
    public_key: str


def valid_public_key(value: str) -> str:
    if not _PUBLIC_KEY.match(value):
        raise ValueError(f"{value!r} is not a NATS user public key (U followed by 55 base32 characters)")
    return value


def fold_identities(events: Iterable[Event]) -> dict[str, NodeIdentity]:
    """node id -> its current identity: the last key issued, none once revoked."""
    found: dict[str, NodeIdentity] = {}
    for event in events:
        match event:
            case NodeCredentialsIssued():
                found[event.node_id] = NodeIdentity(event.node_id, event.public_key)
            case NodeCredentialsRevoked():
                found.pop(event.node_id, None)
    return found


def node_accelerator_ids(node_id: str) -> list[str]:
    gpus = [subjects.accelerator_id(node_id, "gpu", i) for i in range(subjects.MAX_GPUS_PER_NODE)]
    return [subjects.accelerator_id(node_id, "cpu", 0), *gpus]


def node_permissions(identity: NodeIdentity) -> dict[str, list[str]]:
    node = subjects.token(identity.node_id, "node id")
    consumer = f"agent-{node}"  # nodeagent/agent/jobs.py: consumer_name
    work = subjects.WORK_STREAM
    accelerators = node_accelerator_ids(node)
    publish = [
        *(subjects.event_subject(subjects.Aggregate.NODE, node, event) for event in AGENT_NODE_EVENTS),
        *(subjects.aggregate_filter(subjects.Aggregate.ACCELERATOR, a) for a in accelerators),
        *(f"{subjects.EVENTS_PREFIX}.{aggregate.value}.*.{event}" for aggregate, event in SHARED_EVENTS),
        *(subjects.telemetry_subject(node, a) for a in accelerators),
        subjects.agent_metrics_subject(node),
        f"$JS.API.DIRECT.GET.{subjects.EVENTS_STREAM}",
        f"$JS.API.STREAM.MSG.GET.{subjects.EVENTS_STREAM}",
        # Its job consumer only, and only with its own jobs as the filter (the create subject
        # carries the filter, which the server holds the request's to).
        f"$JS.API.CONSUMER.CREATE.{work}.{consumer}.{subjects.node_jobs_filter(node)}",
        f"$JS.API.CONSUMER.DELETE.{work}.{consumer}",
        f"$JS.API.CONSUMER.MSG.NEXT.{work}.{consumer}",
        f"$JS.ACK.{work}.{consumer}.>",
        # Artifact sets from the bucket: an object's meta, its chunks through an ordered consumer.
        f"$JS.API.STREAM.INFO.{subjects.ARTIFACTS_STREAM}",
        f"$JS.API.STREAM.MSG.GET.{subjects.ARTIFACTS_STREAM}",
        f"$JS.API.CONSUMER.CREATE.{subjects.ARTIFACTS_STREAM}",
        f"$JS.FC.{subjects.ARTIFACTS_STREAM}.>",
        "_INBOX.>",  # replies to the gateway's invokes (which may come after allow_responses expires)
    ]
    subscribe = [
        f"{subjects.INVOKE_PREFIX}.{node}.*",
        subjects.alive_subject(node),  # answered while its connection lives (agent/liveness.py)
        f"{subjects.node_inbox_prefix(valid_public_key(identity.public_key))}.>",
    ]
    return {"publish": publish, "subscribe": subscribe}


def _strings(values: list[str]) -> str:
    return "[" + ", ".join(json.dumps(v) for v in values) + "]"


def node_user(identity: NodeIdentity, indent: str = "      ") -> str:
    permissions = node_permissions(identity)
    return (
        f"{indent}# node {identity.node_id}\n"
        f"{indent}{{ nkey: {identity.public_key}, permissions: {{\n"
        f"{indent}    publish: {_strings(permissions['publish'])}\n"
        f"{indent}    subscribe: {_strings(permissions['subscribe'])}\n"
        f"{indent}}} }}\n"
    )


def render_node_users(identities: Mapping[str, NodeIdentity], indent: str = "      ") -> str:
    return "".join(node_user(identities[node], indent) for node in sorted(identities))


def with_node_users(config: str, identities: Mapping[str, NodeIdentity]) -> str:
    """`config` with the lines between its BEGIN and END markers replaced by `identities`' users."""
    found = re.search(
        rf"^([ \t]*){re.escape(BEGIN)}[^\n]*\n(.*?)^[ \t]*{re.escape(END)}", config, re.M | re.S
    )
    if found is None:
        raise ValueError(f"the configuration has no '{BEGIN}' ... '{END}' lines to render the nodes between")
    users = render_node_users(identities, found.group(1))
    return config[: found.start(2)] + users + config[found.end(2) :]
