"""No role of deploy/nats/nats.conf but the provisioner may change a stream, and none may delete or
purge one; a node's user touches only its own node's jobs, invokes and events: each role tries each
forbidden act and the server refuses it (a permissions violation, sent back before the PONG of the
flush that follows), leaving every stream as it was."""

from __future__ import annotations

import json
import ssl
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client

from eventstore.connection import Connection, OrderedFlushClient, connect, inbox_prefix
from eventstore.errors import StreamsNotProvisioned
from eventstore.provision import provision
from eventstore.store import EventStore
from eventstore.tls import nats_tls
from modelforge.devstack.nats_server import NatsServer
from projections.scenario import control_plane, traffic
from streams import configs, subjects
from tests.integration.deployment_nats import NODES, deployment_server, seed_file, url
from tests.integration.projections.helpers import publish

STREAMS = [config.name or "" for config in configs.all_streams() + configs.limit_streams()]
NODE, OTHER = NODES  # node-a tries node-b's
ROLES = ("gateway", NODE, "projector", "audit")
READERS = ("projector", "audit")


def _stream_acts() -> Iterator[tuple[str, bytes]]:
    for config in configs.all_streams() + configs.limit_streams():
        changed = config.as_dict() | {"description": "changed", "deny_delete": False, "deny_purge": False}
        body = json.dumps(changed).encode()
        yield f"$JS.API.STREAM.CREATE.{config.name}", body
        yield f"$JS.API.STREAM.UPDATE.{config.name}", body
        yield f"$JS.API.STREAM.DELETE.{config.name}", b""
        yield f"$JS.API.STREAM.PURGE.{config.name}", b""
        if config.name != subjects.LIMITS_CONCURRENCY_STREAM:  # the gateway releases its slots so
            yield f"$JS.API.STREAM.MSG.DELETE.{config.name}", b'{"seq": 1}'


# Consumers of other roles: an agent's job consumer, a projector's reader, a gateway's followers.
AGENT_CONSUMER = f"$JS.API.CONSUMER.DELETE.{subjects.WORK_STREAM}.agent-{OTHER}"
PROJECTOR_CONSUMER = f"$JS.API.CONSUMER.DELETE.{subjects.EVENTS_STREAM}.mfproj_0123456789abcdef"
TELEMETRY_CONSUMER = f"$JS.API.CONSUMER.DELETE.{subjects.TELEMETRY_STREAM}.gatewayfollower"
GATEWAY_CONSUMERS = [
    f"$JS.API.CONSUMER.DELETE.{stream}.gatewayfollower" for stream in subjects.PROJECTED_STREAMS
]
WORK = subjects.WORK_STREAM
# What node-a's user may not do to node-b (or to its own node's history, which is not the agent's).
OTHER_NODES_ACTS = [
    f"$JS.API.CONSUMER.CREATE.{WORK}.agent-{OTHER}.{subjects.node_jobs_filter(OTHER)}",
    f"$JS.API.CONSUMER.CREATE.{WORK}.agent-{NODE}.{subjects.node_jobs_filter(OTHER)}",
    f"$JS.API.CONSUMER.DURABLE.CREATE.{WORK}.agent-{NODE}",  # (its filter would be unchecked)
    f"$JS.API.CONSUMER.MSG.NEXT.{WORK}.agent-{OTHER}",
    f"$JS.ACK.{WORK}.agent-{OTHER}.1.1.1.1.0",
    subjects.event_subject(subjects.Aggregate.NODE, OTHER, "NodeRegistered"),
    subjects.event_subject(subjects.Aggregate.NODE, OTHER, "WorkerStarted"),
    subjects.event_subject(subjects.Aggregate.ACCELERATOR, f"{OTHER}-cpu0", "ResidencyLoaded"),
    subjects.event_subject(subjects.Aggregate.ACCELERATOR, f"{OTHER}-gpu0", "ResidencyReconciled"),
    subjects.telemetry_subject(OTHER, f"{OTHER}-cpu0"),
    subjects.telemetry_subject(NODE, f"{OTHER}-cpu0"),
    subjects.event_subject(subjects.Aggregate.NODE, NODE, "NodeCredentialsIssued"),
    subjects.event_subject(subjects.Aggregate.NODE, NODE, "NodeLost"),
    subjects.event_subject(subjects.Aggregate.NODE, NODE, "NodeEnabled"),
    # On the shared aggregates, only a job's outcome, a fetch's progress and a registration.
    subjects.event_subject(subjects.Aggregate.CANDIDATE, "cand", "CandidateLabReady"),
    subjects.event_subject(subjects.Aggregate.CANDIDATE, "cand", "CandidateRegistered"),
    subjects.event_subject(subjects.Aggregate.CANDIDATE, "cand", "ProbeRequested"),
    subjects.event_subject(subjects.Aggregate.ARTIFACT_SET, "set", "ArtifactSetQuarantined"),
]
OTHER_NODES_READS = [
    subjects.invoke_subject(OTHER, "dep"),
    subjects.alive_subject(OTHER),  # (answering another node's would keep it alive to the gateway)
    f"{subjects.INVOKE_PREFIX}.>",
    subjects.node_jobs_filter(OTHER),
    subjects.node_jobs_filter(NODE),  # (jobs come through its consumer, never a subscription)
    "_INBOX.>",  # every other connection's replies
]
EVENT = subjects.event_subject(subjects.Aggregate.CLIENT, "intruder", "ClientCreated")
WRITES = [
    EVENT,
    subjects.request_subject("rag.embedding@1", "RequestAccepted"),
    subjects.job_subject("node-1", "dep", "load"),
    subjects.invoke_subject("node-1", "dep"),
    subjects.alive_subject("node-1"),
    subjects.telemetry_subject("node-1", "gpu0"),
    subjects.rate_window_subject("client", 1),
    f"$O.{subjects.ARTIFACTS_BUCKET}.C.intruder",  # the artifact bucket's chunks and object meta
    f"$O.{subjects.ARTIFACTS_BUCKET}.M.intruder",
]

FORBIDDEN: list[tuple[str, str, bytes]] = [
    *((role, subject, body) for role in ROLES for subject, body in _stream_acts()),
    *((role, AGENT_CONSUMER, b"") for role in ("gateway", NODE, "projector", "audit")),
    *((role, PROJECTOR_CONSUMER, b"") for role in ("gateway", NODE, "audit", "projector")),
    *((role, TELEMETRY_CONSUMER, b"") for role in (NODE, "projector", "audit")),
    *(("projector", subject, b"") for subject in GATEWAY_CONSUMERS),
    *((role, subject, b"{}") for role in READERS for subject in WRITES),
    (NODE, EVENT, b"{}"),  # an agent appends only its node's, its accelerators' and its jobs' events
    (NODE, subjects.job_subject("node-1", "dep", "load"), b"{}"),
    (NODE, subjects.invoke_subject(OTHER, "dep"), b"{}"),
    (NODE, subjects.rate_window_subject("client", 1), b"{}"),
    *((NODE, subject, b"{}") for subject in OTHER_NODES_ACTS),
    (NODE, f"$O.{subjects.ARTIFACTS_BUCKET}.C.intruder", b"x"),  # and only reads the artifact bucket
    (NODE, f"$O.{subjects.ARTIFACTS_BUCKET}.M.intruder", b"{}"),
    ("gateway", subjects.telemetry_subject("node-1", "gpu0"), b"{}"),
]


@pytest.fixture(scope="module")
async def gateway(deployment_nats: NatsServer, provisioner: Connection) -> AsyncIterator[Connection]:
    conn = await connect(url(deployment_nats, "gateway"), "refusals-gateway")
    run = f"ref{uuid.uuid4().hex[:6]}"
    await publish(EventStore(conn), [*control_plane(run), *traffic(run, 5)])
    await conn.client.jetstream().publish(subjects.job_subject("node-1", "dep", "load"), b"{}")
    yield conn
    await conn.close()


class Refusals:
    """A role's connection and the permissions violations the server sent it."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.client = OrderedFlushClient()  # its flush's PING follows the publish on the wire

    async def on_error(self, exc: Exception) -> None:
        self.errors.append(str(exc).removeprefix("nats: "))


@pytest.fixture(scope="module")
async def roles(deployment_nats: NatsServer, gateway: Connection) -> AsyncIterator[dict[str, Refusals]]:
    connected = {role: Refusals() for role in ROLES}
    for role, refusals in connected.items():
        if role in NODES:  # signs in with its node's nkey, replies on its own inbox
            seed = str(seed_file(deployment_nats, role))
            await refusals.client.connect(
                f"nats://127.0.0.1:{deployment_nats.port}",
                nkeys_seed=seed,
                inbox_prefix=inbox_prefix(seed),
                error_cb=refusals.on_error,
                tls=nats_tls(),
            )
        else:
            await refusals.client.connect(
                url(deployment_nats, role), error_cb=refusals.on_error, tls=nats_tls()
            )
    yield connected
    for refusals in connected.values():
        await refusals.client.close()


async def _streams(client: Client) -> dict[str, tuple[object, ...]]:
    js = client.jetstream()
    found = {}
    for name in STREAMS:
        info = await js.stream_info(name)
        found[name] = (info.state.messages, info.state.first_seq, info.state.last_seq, info.config)
    return found


@pytest.mark.parametrize(("role", "subject", "body"), FORBIDDEN, ids=[f"{r}:{s}" for r, s, _ in FORBIDDEN])
async def test_each_role_is_refused_each_forbidden_act_and_the_streams_keep_every_message(
    roles: dict[str, Refusals], provisioner: Connection, role: str, subject: str, body: bytes
) -> None:
    before = await _streams(provisioner.client)
    refusals = roles[role]
    refusals.errors.clear()
    await refusals.client.publish(subject, body, reply=refusals.client.new_inbox())
    await refusals.client.flush()
    # (nats-py lower-cases the server's -ERR)
    assert f'permissions violation for publish to "{subject.lower()}"' in refusals.errors
    assert await _streams(provisioner.client) == before


@pytest.mark.parametrize("subject", OTHER_NODES_READS)
async def test_a_node_user_may_not_read_another_nodes_invokes_or_jobs_or_anyones_replies(
    roles: dict[str, Refusals], subject: str
) -> None:
    refusals = roles[NODE]
    refusals.errors.clear()
    subscription = await refusals.client.subscribe(subject)
    await refusals.client.flush()
    await subscription.unsubscribe()
    assert f'permissions violation for subscription to "{subject.lower()}"' in refusals.errors


async def test_a_gateway_that_may_not_make_the_streams_names_the_missing_ones(scratch: Path) -> None:
    with deployment_server(scratch) as bare:
        conn = await connect(url(bare, "gateway"), "refusals-gateway-bare")
        try:
            with pytest.raises(StreamsNotProvisioned) as refused:
                await provision(conn.client)
        finally:
            await conn.close()
    assert refused.value.problems == [f"{name} is missing" for name in STREAMS[:6]]
    assert "run `modelforge provision`" in str(refused.value)


async def test_a_role_whose_client_does_not_trust_the_deployments_ca_is_refused(
    deployment_nats: NatsServer,
) -> None:
    # The file's tls block is kept (verify on): a role's password alone does not get a client in.
    with pytest.raises(ssl.SSLCertVerificationError):
        await nats.connect(url(deployment_nats, "gateway"), allow_reconnect=False, connect_timeout=5)
