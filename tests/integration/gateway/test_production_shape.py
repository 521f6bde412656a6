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

from streams import subjects
from streams.events import control as c
from streams.events import serving as s
from streams.events.requests import RequestCompleted
from tests.support.fleet import (
    HEARTBEAT_S,
    Answer,
    Fleet,
    Load,
    StoredEvent,
    accelerator_of,
    last_sequence,
    loaded_on,
    running_fleet,
    stored_until,
)

CLIENTS = 16
# The node-loss bound: two heartbeat (telemetry) intervals of the agents, as the issue states it.
BOUND_S = 2 * HEARTBEAT_S
# A request in flight to a lost node is run once more on the other copy once the loss is declared,
# queued behind the other clients' requests on a machine the whole suite shares: one interval more.
RETRY_S = HEARTBEAT_S


@pytest.fixture(scope="module")
async def fleet(tmp_path_factory: pytest.TempPathFactory, minilm_root: Path) -> AsyncIterator[Fleet]:
    async with running_fleet(tmp_path_factory.mktemp("fleet"), minilm_root) as started:
        yield started


def _described(answers: list[Answer]) -> list[tuple[int, str, float]]:
    return [(a.status, a.code, round(a.waited, 2)) for a in answers if a.status != 200]


async def _every_copy_back(fleet: Fleet) -> None:
    """Each agent a test killed started again, with its copy loaded once more (`replicas.min`)."""
    since = await last_sequence(fleet.connection, subjects.EVENTS_STREAM) + 1
    dead = [agent for agent in fleet.agents if not agent.running]
    for agent in dead:
        await agent.start(fleet.connection)
    if dead:
        await loaded_on(fleet.connection, fleet.deployment_id, len(dead), since)


async def test_a_healthy_cluster_answers_every_request_of_sixteen_clients(fleet: Fleet) -> None:
    async with Load(fleet, CLIENTS) as load:
        await load.answered(CLIENTS * 8)
    assert _described(load.answers) == []


async def test_an_agent_killed_mid_load_costs_no_request_its_deadline_and_its_leases_end_in_the_bound(
    fleet: Fleet,
) -> None:
    await _every_copy_back(fleet)
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
    assert slowest <= BOUND_S + RETRY_S, _described(touched)
    lost = [e.event for e in events if isinstance(e.event, c.NodeLost)]
    assert [e.node_id for e in lost] == [victim.node]  # once, of two gateways
    assert events[-1].event == s.ResidencyReconciled(
        accelerator_id=accelerator, generation=lost[0].generation, held=(), dropped=(fleet.deployment_id,)
    )
    assert events[-1].stored - killed_at <= BOUND_S  # its leases and its copy ended with it
    assert sum(a.status == 200 for a in touched) > len(touched) // 2  # the other copy served on


async def test_losing_the_mf_events_leader_mid_load_loses_no_completion_and_leaves_no_lease(
    fleet: Fleet,
) -> None:
    await _every_copy_back(fleet)
    js = fleet.connection.client.jetstream()
    info = await js.stream_info(subjects.EVENTS_STREAM)
    assert info.cluster is not None
    assert info.cluster.leader is not None
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
    await _completions(fleet, requests_since, served)
    ended = await _lease_ends(fleet, events_since, {a.request_id for a in load.answers})
    answered_at = {a.request_id: a.ended for a in load.answers}
    outlived = {request: round(at - answered_at[request], 2) for request, at in ended.items()}
    print(f"longest a lease outlived its request: {max(outlived.values()):.2f} s")
    assert {r: late for r, late in outlived.items() if late > BOUND_S} == {}


async def _completions(fleet: Fleet, since: int, served: set[str]) -> None:
    """Wait until every request in `served` has its RequestCompleted (fails after WAIT_S)."""
    missing = set(served)

    def all_in(stored: StoredEvent) -> bool:
        if isinstance(stored.event, RequestCompleted):
            missing.discard(stored.event.request_id)
        return not missing

    if missing:
        await stored_until(fleet.connection, subjects.REQUESTS_STREAM, since, all_in)


async def _lease_ends(fleet: Fleet, since: int, requests: set[str]) -> dict[str, float]:
    """When the last lease granted to each of `requests` ended (stored: its release, its expiry, or
    its accelerator's reconciliation), once every one has (fails after WAIT_S)."""
    grants: dict[str, s.LeaseGranted] = {}
    open_at: dict[str, set[str]] = {}  # accelerator -> leases not ended
    ended: dict[str, float] = {}
    last = await last_sequence(fleet.connection, subjects.EVENTS_STREAM)

    def settled(stored: StoredEvent) -> bool:
        match stored.event:
            case s.LeaseGranted(request_id=request) as grant if request in requests:
                grants[grant.lease_id] = grant
                open_at.setdefault(grant.accelerator_id, set()).add(grant.lease_id)
            case s.LeaseReleased(lease_id=lease) | s.LeaseExpired(lease_id=lease) if lease in grants:
                open_at[grants[lease].accelerator_id].discard(lease)
                ended[grants[lease].request_id] = stored.stored
            case s.ResidencyReconciled(accelerator_id=accelerator):
                for lease in open_at.pop(accelerator, set()):
                    ended[grants[lease].request_id] = stored.stored
        return stored.sequence >= last and not any(open_at.values())

    await stored_until(fleet.connection, subjects.EVENTS_STREAM, since, settled)
    return ended
