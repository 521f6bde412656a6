"""Standby leases on a three-server NATS cluster (R3 streams): while MF_EVENTS elects a new leader
after its server is killed, warm requests are served under the gateway's standby lease, with no
lease of their own appended, and the accelerator's books never over-commit; and a standby lease
never holds up an operator's unload (its holder lets it go once the unload lands)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import msgspec
import pytest
from prometheus_client.parser import text_string_to_metric_families

from eventstore.provision import REPLICAS_ENV
from gateway.operations.service import Operations
from gateway.process import STANDBY_LEASES_ENV
from gateway.promotion.context import PromotionContext
from gateway.scheduler.standby import is_standby
from streams import subjects
from streams.envelope import Actor, ActorKind
from streams.events import serving as s
from tests.integration.gateway.conftest import Stack
from tests.integration.gateway.residents import embed, holding_standby, serving_ctx
from tests.support.cluster import Cluster, elected, lead_from, running_cluster
from tests.support.fleet_events import completions, last_sequence, over_commits, stored_events

SLOTS = 3
OTHER_STREAMS = (
    subjects.REQUESTS_STREAM,
    subjects.WORK_STREAM,
    subjects.TELEMETRY_STREAM,
    subjects.LIMITS_RATE_STREAM,
    subjects.LIMITS_CONCURRENCY_STREAM,
)
DEADLINE_MS = 20_000  # what a request is given to live through the election, if it waits for it


class ClusterUrl(msgspec.Struct):
    url: str


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with pytest.MonkeyPatch.context() as env:
        env.setenv(REPLICAS_ENV, "3")
        env.setenv(STANDBY_LEASES_ENV, str(SLOTS))  # the module's gateway holds standby leases
        with running_cluster(tmp_path_factory.mktemp("cluster")) as started:
            yield started


@pytest.fixture(scope="module")
async def module_nats(cluster: Cluster) -> ClusterUrl:
    """The first server alone: the stack's gateway and agent stay connected through the loss of
    another one, which then leaves MF_EVENTS leaderless and nothing else (an agent that reconnects
    meanwhile fails a request of its own, which is not what this module is about)."""
    await elected(cluster)
    return ClusterUrl(cluster.members[0].url)


async def test_warm_requests_run_under_the_standby_lease_while_mf_events_has_no_leader(
    stack: Stack, cluster: Cluster
) -> None:
    ctx = serving_ctx(stack)
    async with httpx.AsyncClient(timeout=60) as http:  # the first request loads the model
        assert (await embed(http, stack, "first", DEADLINE_MS)).status_code == 200
    standby = await holding_standby(ctx)
    (grant,) = [g for g in ctx.live.lease_grants.values() if g.lease_id == standby]
    assert grant.reserved_bytes > 0
    # MF_EVENTS led by a server nobody is connected to; every other stream by the one they are
    # connected to, so that only MF_EVENTS elects once the first is killed.
    keeper, doomed = cluster.members[0].name, cluster.members[1].name
    await lead_from(stack.connection, subjects.EVENTS_STREAM, doomed)
    for stream in OTHER_STREAMS:
        await lead_from(stack.connection, stream, keeper)
    requests_from = await last_sequence(stack.connection, subjects.REQUESTS_STREAM) + 1
    async with httpx.AsyncClient(timeout=60) as http:
        assert (await embed(http, stack, "before", DEADLINE_MS)).status_code == 200
        cluster.kill(doomed)
        during = [await embed(http, stack, f"during {i}", DEADLINE_MS) for i in range(SLOTS)]
        assert [r.status_code for r in during] == [200] * SLOTS, [r.text for r in during]
        await stack.gateway.settled()
    served = {r.headers["x-request-id"] for r in during}
    completed = await completions(stack.connection, requests_from, served)
    assert sorted(c.request_id for c in completed) == sorted(served)  # one each
    under_standby = [c for c in completed if c.standby_lease_id]
    assert under_standby, "no request ran under the standby lease"
    assert {c.standby_lease_id for c in under_standby} <= {
        e.event.lease_id
        for e in await stored_events(stack.connection, subjects.EVENTS_STREAM, 1)
        if isinstance(e.event, s.LeaseGranted) and is_standby(e.event.lease_id)
    }
    assert await over_commits(stack.connection) == []
    async with httpx.AsyncClient() as http:
        scraped = (await http.get(f"{stack.gateway.url}/metrics")).text
    metrics = {f.name: f for f in text_string_to_metric_families(scraped)}
    (ran,) = [x.value for x in metrics["modelforge_standby_requests"].samples if x.name.endswith("_total")]
    assert ran >= len(under_standby)
    held = [
        x
        for x in metrics["modelforge_standby_slots"].samples
        if x.labels["deployment"] == stack.deployment_id
    ]
    assert [x.value for x in held] == [SLOTS]


async def test_an_operators_unload_goes_ahead_under_a_standby_lease_which_its_holder_lets_go(
    stack: Stack,
) -> None:
    ctx = serving_ctx(stack)
    async with httpx.AsyncClient(timeout=60) as http:  # resident (again), with a standby lease
        assert (await embed(http, stack, "resident", DEADLINE_MS)).status_code == 200
    standby = await holding_standby(ctx)
    await stack.gateway.settled()  # the request's own lease given back
    operations = Operations(PromotionContext(ctx, Actor(ActorKind.OPERATOR, "tests")))
    was_resident, reclaimed = await operations.unload(stack.deployment_id)
    assert was_resident
    assert reclaimed > 0
    assert await ctx.live.wait_for(lambda: standby not in ctx.live.lease_grants, 30)  # let go
