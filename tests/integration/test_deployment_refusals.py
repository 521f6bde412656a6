"""No role of deploy/nats/nats.conf but the provisioner may change a stream, and none may delete or
purge one: each role tries each forbidden act and the server refuses it (a permissions violation,
sent back before the PONG of the flush that follows), leaving every stream as it was."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from nats.aio.client import Client

from eventstore.connection import Connection, OrderedFlushClient, connect
from eventstore.errors import StreamsNotProvisioned
from eventstore.provision import provision
from eventstore.store import EventStore
from modelforge.devstack.nats_server import NatsServer
from projections.scenario import control_plane, traffic
from streams import configs, subjects
from tests.integration.deployment_nats import deployment_server, url
from tests.integration.projections.helpers import publish

STREAMS = [config.name or "" for config in configs.all_streams() + configs.limit_streams()]
ROLES = ("gateway", "agent", "projector", "audit")
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
AGENT_CONSUMER = f"$JS.API.CONSUMER.DELETE.{subjects.WORK_STREAM}.agent-node-1"
PROJECTOR_CONSUMER = f"$JS.API.CONSUMER.DELETE.{subjects.EVENTS_STREAM}.mfproj_0123456789abcdef"
TELEMETRY_CONSUMER = f"$JS.API.CONSUMER.DELETE.{subjects.TELEMETRY_STREAM}.gatewayfollower"
GATEWAY_CONSUMERS = [
    f"$JS.API.CONSUMER.DELETE.{stream}.gatewayfollower" for stream in subjects.PROJECTED_STREAMS
]
EVENT = subjects.event_subject(subjects.Aggregate.CLIENT, "intruder", "ClientCreated")
WRITES = [
    EVENT,
    subjects.request_subject("rag.embedding@1", "RequestAccepted"),
    subjects.job_subject("node-1", "dep", "load"),
    subjects.invoke_subject("node-1", "dep"),
    subjects.telemetry_subject("node-1", "gpu0"),
    subjects.rate_window_subject("client", 1),
]

FORBIDDEN: list[tuple[str, str, bytes]] = [
    *((role, subject, body) for role in ROLES for subject, body in _stream_acts()),
    *((role, AGENT_CONSUMER, b"") for role in ("gateway", "projector", "audit")),
    *((role, PROJECTOR_CONSUMER, b"") for role in ("gateway", "agent", "audit", "projector")),
    *((role, TELEMETRY_CONSUMER, b"") for role in ("agent", "projector", "audit")),
    *(("projector", subject, b"") for subject in GATEWAY_CONSUMERS),
    *((role, subject, b"{}") for role in READERS for subject in WRITES),
    ("agent", EVENT, b"{}"),  # an agent appends only node, accelerator, artifact-set, candidate events
    ("agent", subjects.job_subject("node-1", "dep", "load"), b"{}"),
    ("agent", subjects.rate_window_subject("client", 1), b"{}"),
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
        await refusals.client.connect(url(deployment_nats, role), error_cb=refusals.on_error)
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


async def test_a_gateway_that_may_not_make_the_streams_names_the_missing_ones(scratch: Path) -> None:
    with deployment_server(scratch) as bare:
        conn = await connect(url(bare, "gateway"), "refusals-gateway-bare")
        try:
            with pytest.raises(StreamsNotProvisioned) as refused:
                await provision(conn.client)
        finally:
            await conn.close()
    assert refused.value.problems == [f"{name} is missing" for name in STREAMS[:4]]
    assert "run `modelforge provision`" in str(refused.value)
