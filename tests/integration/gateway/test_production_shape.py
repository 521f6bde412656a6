"""The production shape under load (tests.support.fleet): three nats-servers (TLS, R3 streams), two
gateway processes, two agent processes each with its own artifact cache, MiniLM kept on both
(`replicas.min = 2`), sixteen clients. A healthy cluster answers every request; an agent's SIGKILL
costs no request its deadline and ends the lost node's leases within two heartbeat intervals; the
loss of the server leading MF_EVENTS loses no acknowledged request and leaves no lease behind."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from eventstore.store import PUBLISH_TIMEOUT_S
from gateway.serving.node_loss import GONE_REASON
from streams import subjects
from streams.events import control as c
from streams.events import serving as s
from tests.support.cluster import lead_from
from tests.support.fleet import (
    HEARTBEAT_S,
    Answer,
    Fleet,
    Load,
    accelerator_of,
    every_copy_back,
    running_fleet,
    sampled_since,
)
from tests.support.fleet_events import (
    StoredEvent,
    completions,
    last_sequence,
    lease_ends,
    over_commits,
    stored_events,
    stored_until,
)

CLIENTS = 16
# The node-loss bound: two heartbeat (telemetry) intervals of the agents, as the issue states it.
# The killed agent's last sample came at most an interval before the kill; a gateway asks the node
# whether its agent is connected an interval and a second (node_loss.LIVENESS_MARGIN_S) after that
# sample, NATS answers "no responders", and the loss is declared: the upkeep round, its appends and
# (for a request that was in flight to it) the run on the other copy fit in the interval left.
BOUND_S = 2 * HEARTBEAT_S


@pytest.fixture(scope="module")
async def fleet(tmp_path_factory: pytest.TempPathFactory, minilm_root: Path) -> AsyncIterator[Fleet]:
    async with running_fleet(tmp_path_factory.mktemp("fleet"), minilm_root) as started:
        yield started


def _described(answers: list[Answer]) -> list[tuple[int, str, float]]:
    return [(a.status, a.code, round(a.waited, 2)) for a in answers if a.status != 200]


async def test_a_healthy_cluster_answers_every_request_of_sixteen_clients(fleet: Fleet) -> None:
    async with Load(fleet, CLIENTS) as load:
        await load.answered(CLIENTS * 8)
    assert _described(load.answers) == []


async def test_an_agent_killed_mid_load_costs_no_request_its_deadline_and_its_leases_end_in_the_bound(
    fleet: Fleet,
) -> None:
    await every_copy_back(fleet)
    victim = fleet.agents[1]
    accelerator = accelerator_of(victim)
    since = await last_sequence(fleet.connection, subjects.EVENTS_STREAM) + 1
    async with Load(fleet, CLIENTS) as load:
        await load.answered(CLIENTS * 4)
        killed_at = time.time()
        victim.kill()

        def reconciled(stored: StoredEvent) -> bool:
            return (
                isinstance(stored.event, s.ResidencyReconciled) and stored.event.accelerator_id == accelerator
            )

        events = await stored_until(fleet.connection, subjects.EVENTS_STREAM, since, reconciled)
        await load.answered(len(load.answers) + CLIENTS * 4)  # and the survivor serves on
    touched = [a for a in load.answers if a.ended >= killed_at]
    slowest = max(a.waited for a in touched)
    print(f"\nagent SIGKILL: {len(_described(touched))} of {len(touched)} answers after it not 200; "
          f"slowest {slowest:.2f} s; leases ended {events[-1].stored - killed_at:.2f} s after it")  # fmt: skip
    assert all(a.status in (200, 503) for a in load.answers), _described(load.answers)
    assert slowest <= BOUND_S, _described(touched)
    lost = [e.event for e in events if isinstance(e.event, c.NodeLost)]
    assert [(e.node_id, e.reason) for e in lost] == [(victim.node, GONE_REASON)]  # once, of two gateways
    assert events[-1].event == s.ResidencyReconciled(
        accelerator_id=accelerator, generation=lost[0].generation, held=(), dropped=(fleet.deployment_id,)
    )
    assert events[-1].stored - killed_at <= BOUND_S  # its leases and its copy ended with it
    assert sum(a.status == 200 for a in touched) > len(touched) // 2  # the other copy served on


async def test_losing_the_mf_events_leader_mid_load_loses_no_completion_and_leaves_no_lease(
    fleet: Fleet,
) -> None:
    await every_copy_back(fleet)
    js = fleet.connection.client.jetstream()
    info = await js.stream_info(subjects.EVENTS_STREAM)
    assert info.cluster is not None
    assert info.cluster.leader is not None
    # MF_TELEMETRY led from the same server: the agents' samples meet the election too.
    await lead_from(fleet.connection, subjects.TELEMETRY_STREAM, info.cluster.leader)
    events_since = info.state.last_seq + 1
    requests_since = await last_sequence(fleet.connection, subjects.REQUESTS_STREAM) + 1
    async with Load(fleet, CLIENTS) as load:
        await load.answered(CLIENTS * 4)
        killed_at = time.time()
        fleet.cluster.kill(info.cluster.leader)
        await load.answered(len(load.answers) + CLIENTS * 8)
    during = [a for a in load.answers if a.ended >= killed_at]
    print(f"\nMF_EVENTS leader ({info.cluster.leader}) lost: error rate during failover "
          f"{len(_described(during))}/{len(during)} = {len(_described(during)) / len(during):.1%}; "
          f"slowest {max(a.waited for a in during):.2f} s; not 200: {_described(during)}")  # fmt: skip
    served = {a.request_id for a in load.answers if a.status == 200}
    await completions(fleet.connection, requests_since, served)
    ended = await lease_ends(fleet.connection, events_since, {a.request_id for a in load.answers})
    answered_at = {a.request_id: a.ended for a in load.answers}
    outlived = {request: round(at - answered_at[request], 2) for request, at in ended.items()}
    print(f"longest a lease outlived its request: {max(outlived.values()):.2f} s")
    # Every request appends its grant, so the slowest one answered during the failover waited out
    # the election (and its append's attempts); a release sent meanwhile lands within one attempt of
    # the stream leading again. How long that takes is the machine's (the slowest answer took 5.4-10.1
    # s in five runs at load average 10-19): the bound is drawn from this run's own failover.
    bound_s = max(BOUND_S, max(a.waited for a in during) + PUBLISH_TIMEOUT_S)
    assert {r: late for r, late in outlived.items() if late > bound_s} == {}
    # The gateways hear no sample while MF_TELEMETRY elects a leader: that silence is the bus's, and
    # no live node may be declared lost for it (gateway.state.feed).
    await sampled_since(fleet, killed_at + BOUND_S)  # a node silent through the election is lost by now
    events = await stored_events(fleet.connection, subjects.EVENTS_STREAM, events_since)
    assert [e.event.node_id for e in events if isinstance(e.event, c.NodeLost)] == []
    # A replay of the whole log through the election finds no grant past an accelerator's capacity.
    assert await over_commits(fleet.connection) == []
