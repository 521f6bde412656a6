"""Client limits on a three-server cluster when the server leading both limit streams dies: while
the streams elect new leaders, a replica admits from its share of each limit with no message, and
the rate units it so admitted are on the shared counter once the rate stream answers again.

One cluster and one loss for the module (an election takes 4–9 s): the tests run in order, the
first three while the streams have no leader (each checks that they still have none), the last
after the election."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.errors import NotFoundError, ServiceUnavailableError

from eventstore.connection import Connection
from eventstore.replies import resend_while_leaderless
from gateway.clients.limit_streams import provision_limits
from gateway.clients.limits import RequestLimiter
from gateway.clients.model import ClientPrincipal
from gateway.clients.permit import Permit
from streams import subjects
from streams.codes import ServingError
from streams.envelope import new_id
from tests.integration.clients.conftest import FixedClock
from tests.support.cluster import Cluster, connected_to_two_members, lead_from

ELECTION_WAIT_S = 60.0  # an election, the probe's next try and the owed units' publish, on a busy machine


def principal(rpm: int, concurrency: int) -> ClientPrincipal:
    client_id = f"cl_{new_id()}"
    return ClientPrincipal(client_id, client_id, frozenset(), rpm, concurrency, 0, None, "cred_degraded")


@dataclass
class Outage:
    cluster: Cluster
    connection: Connection  # to a member that lives on
    limiter: RequestLimiter
    minute: FixedClock
    seen_before: ClientPrincipal  # one request counted before the loss (rpm 8: a share of 2)


@pytest.fixture(scope="module")
async def outage(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Outage]:
    members = connected_to_two_members(tmp_path_factory.mktemp("limits-cluster"), "gateway-a", "checker")
    async with members as (cluster, gateway, checker):
        await provision_limits(gateway.client, 3)
        lost = cluster.members[2].name  # neither connection's server: no reconnect in the way
        for stream in (subjects.LIMITS_RATE_STREAM, subjects.LIMITS_CONCURRENCY_STREAM):
            await lead_from(checker, stream, lost)
        for subject in _probes(0):  # the step-down's own election is over: both streams answer
            await resend_while_leaderless(
                lambda subject=subject: _refused_publish(checker, subject),  # type: ignore[misc]
                ELECTION_WAIT_S,
            )
        minute = FixedClock()
        limiter = RequestLimiter(gateway.client, clock=minute)
        seen_before = principal(rpm=8, concurrency=8)
        await (await limiter.acquire(seen_before)).release()  # the limiter saw its total: 1
        cluster.kill(lost)
        yield Outage(cluster, checker, limiter, minute, seen_before)
        await limiter.close()


def _probes(window: int) -> tuple[str, str]:
    return (
        subjects.rate_window_subject("cl_probe", window),
        subjects.slot_subject(subjects.client_slots("cl_probe"), 0),
    )


async def _refused_publish(connection: Connection, subject: str) -> object:
    """A message its stream refuses (wrong last sequence) and stores nothing of, when it answers."""
    return await connection.client.request(
        subject, b"", timeout=5, headers={"Nats-Expected-Last-Subject-Sequence": "1"}
    )


async def _still_leaderless(outage: Outage) -> None:
    """The rate and slot streams answer nothing: the requests before this were admitted with none."""
    for subject in _probes(int(outage.minute.now // 60)):
        with pytest.raises(NoRespondersError):
            await _refused_publish(outage.connection, subject)


async def _attempts(limiter: RequestLimiter, who: ClientPrincipal, count: int) -> list[Permit | ServingError]:
    outcomes: list[Permit | ServingError] = []
    for _ in range(count):
        try:
            outcomes.append(await limiter.acquire(who))
        except ServingError as refused:
            outcomes.append(refused)
    return outcomes


async def test_a_client_within_its_share_is_admitted_while_the_streams_have_no_leader(outage: Outage) -> None:
    permits = await _attempts(outage.limiter, outage.seen_before, 2)  # rpm 8: a share of 2
    assert all(isinstance(p, Permit) for p in permits), permits
    await _still_leaderless(outage)
    for permit in permits:
        assert isinstance(permit, Permit)
        await permit.release()


async def _second_refused(outage: Outage, who: ClientPrincipal) -> str:
    """Two requests of a client with a share of one: the first is admitted, the second refused
    (its code), both while the streams have no leader."""
    first, second = await _attempts(outage.limiter, who, 2)
    await _still_leaderless(outage)
    assert isinstance(first, Permit)
    await first.release()
    assert isinstance(second, ServingError)
    assert second.http_status == 429
    return second.code


async def test_a_client_past_its_rate_share_is_refused_rate_limited(outage: Outage) -> None:
    assert await _second_refused(outage, principal(rpm=4, concurrency=100)) == "RATE_LIMITED"


async def test_a_client_past_its_concurrency_share_is_refused_queue_full(outage: Outage) -> None:
    who = principal(rpm=1000, concurrency=4)
    assert await _second_refused(outage, who) == "QUEUE_FULL"
    third = await outage.limiter.acquire(who)  # the local slot, let go, is free again
    await third.release()


async def test_after_the_election_the_counter_holds_the_units_admitted_from_shares(outage: Outage) -> None:
    window = int(outage.minute.now // 60)
    subject = subjects.rate_window_subject(outage.seen_before.client_id, window)
    js = outage.connection.client.jetstream()
    async with asyncio.timeout(ELECTION_WAIT_S):
        while True:  # the election's end is not announced: read until the owed units landed
            try:
                stored = await js.get_last_msg(subjects.LIMITS_RATE_STREAM, subject)
            except (NotFoundError, NatsTimeoutError, NoRespondersError, ServiceUnavailableError):
                stored = None  # no leader yet (or no owed units yet)
            if stored is not None and json.loads(stored.data or b"{}").get("val") == "3":
                break  # 1 counted before the loss, 2 admitted from the share
            await asyncio.sleep(0.2)
    permit = await outage.limiter.acquire(outage.seen_before)  # counted on the stream again
    await permit.release()
