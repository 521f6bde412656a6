"""The recorded node identities (NodeCredentialsIssued/Revoked on the node aggregates), their
seed files, and the server configuration rendered from them. Used by `modelforge nodes
credentials|revoke` as the provisioner user (the operator's identity, never a running service)."""

from __future__ import annotations

import os
import signal
import tempfile
from collections.abc import Iterable
from pathlib import Path

import nkeys
from nats.aio.client import Client
from nats.js.api import ConsumerConfig, DeliverPolicy

from eventstore.records import record_from
from eventstore.store import EventStore, ExpectedVersion
from gateway.identity.nats_users import NodeIdentity, fold_identities, with_node_users
from streams import subjects
from streams.codes import ServingError
from streams.envelope import Actor, ActorKind
from streams.events.identity import NodeCredentialsIssued, NodeCredentialsRevoked

OPERATOR = Actor(ActorKind.OPERATOR, "nodes-cli")
IDENTITY_EVENTS = (NodeCredentialsIssued.event_type(), NodeCredentialsRevoked.event_type())


def new_seed() -> bytes:
    """A fresh NATS user nkey seed ("SU...")."""
    return bytes(nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER))


def write_private(path: Path, data: bytes) -> None:
    """Write `path` readable by its owner alone (0600 from its creation), replacing it whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # made 0600
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    os.replace(temporary, path)


async def recorded_identities(client: Client) -> dict[str, NodeIdentity]:
    """node id -> its current identity, read from every node aggregate's credential events."""
    js = client.jetstream()
    filters = [f"{subjects.EVENTS_PREFIX}.{subjects.Aggregate.NODE.value}.*.{t}" for t in IDENTITY_EVENTS]
    info = await js.stream_info(subjects.EVENTS_STREAM, subjects_filter=f"{subjects.EVENTS_PREFIX}.node.>")
    if not any(subject.rsplit(".", 1)[-1] in IDENTITY_EVENTS for subject in info.state.subjects or {}):
        return {}
    sub = await js.subscribe(
        "",
        stream=subjects.EVENTS_STREAM,
        ordered_consumer=True,
        config=ConsumerConfig(filter_subjects=filters, deliver_policy=DeliverPolicy.ALL),
    )
    events = []
    try:
        async for msg in sub.messages:
            events.append(record_from(msg.metadata.sequence.stream, msg.subject, msg.headers, msg.data).event)
            if msg.metadata.num_pending == 0:
                break
    finally:
        await sub.unsubscribe()
    return fold_identities(e for e in events if isinstance(e, NodeCredentialsIssued | NodeCredentialsRevoked))


async def issue(store: EventStore, node_id: str, public_key: str) -> None:
    event = NodeCredentialsIssued(node_id=subjects.token(node_id, "node id"), public_key=public_key)
    await store.append(subjects.Aggregate.NODE, node_id, [event], ExpectedVersion.ANY, actor=OPERATOR)


async def revoke(store: EventStore, identities: dict[str, NodeIdentity], node_id: str, reason: str) -> None:
    identity = identities.get(node_id)
    if identity is None:
        raise ServingError(
            "NODE_CREDENTIALS_NOT_FOUND", f"node {node_id} has no credentials to revoke", "node"
        )
    event = NodeCredentialsRevoked(node_id=node_id, public_key=identity.public_key, reason=reason)
    await store.append(subjects.Aggregate.NODE, node_id, [event], ExpectedVersion.ANY, actor=OPERATOR)


def render_config(config: Path, identities: dict[str, NodeIdentity]) -> None:
    """Re-render `config`'s node users in place (a whole new file: a server reading it mid-write
    would otherwise see half of it)."""
    text = with_node_users(config.read_text(), identities)
    fd, temporary = tempfile.mkstemp(dir=config.parent, prefix=f".{config.name}.")
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.chmod(temporary, config.stat().st_mode & 0o777)
    os.replace(temporary, config)


def reload_servers(pids: Iterable[int]) -> None:
    """What `nats-server --signal reload=<pid>` does: the server re-reads its configuration, and
    closes the connections of users it no longer has or whose permissions changed."""
    for pid in pids:
        os.kill(pid, signal.SIGHUP)
