"""Canary releases on a real agent, nats-server and gateway replicas: a 90/10 split of a seeded
stream of requests lands as the pure choice says and within a binomial bound; an experiment that
answers INVALID_OUTPUT past its guard's threshold has its weight taken back to 0 (once, with the
guard's measurement, though two replicas judge it) and is unloaded; a count guard judges the
fleet's total, though no one replica served its threshold, and a replica started after the
failures recovers them; and a replica folding the log from its start holds the same routing state
and routes alike."""

from __future__ import annotations

import asyncio
import json
import math
import random
from pathlib import Path

import httpx
import msgspec
import pytest

from eventstore.store import ExpectedVersion
from gateway.deployments.weights import RoutingKey, bucket_of, choose
from gateway.state.live import LiveState
from streams import subjects
from streams.codes import ServingError
from streams.envelope import new_id
from streams.events import control as c
from streams.events import serving as s
from streams.events.requests import RequestCompleted, RequestFailed
from streams.subjects import Aggregate
from tests.integration.gateway.conftest import Stack, another_deployment, serve_directly, stack_admin
from tests.integration.gateway.test_node_verbs import TOKEN as VERBS_TOKEN
from tests.integration.gateway.test_node_verbs import modelforge
from tests.support.agents import MINILM
from tests.support.models import write_poisoned_embedder
from tests.support.serving import (
    EMBEDDING,
    InProcessGateway,
    events_until,
    probe,
    promote,
    register_artifacts,
)

OPERATOR = "canary-test-operator"
POISON = "poison"  # the poisoned experiment answers a text holding it INVALID_OUTPUT


def live_of(stack: Stack) -> LiveState:
    assert stack.gateway.replica is not None
    return stack.gateway.replica.edge.ctx.live


async def routed_experiment(stack: Stack, folder: str) -> str:
    """The active experiment routed as `folder` (MiniLM copied there), its candidate approved for
    production; made if not made yet."""
    live = live_of(stack)
    made = next((d for d in live.catalog.deployments.values() if d.route == folder), None)
    if made is not None:
        return made.deployment_id
    experiment = await another_deployment(stack, folder, folder)
    await approve_for_production(stack, live.catalog.deployments[experiment].candidate_id)
    return experiment


async def approve_for_production(stack: Stack, candidate_id: str) -> None:
    """A production approval of the candidate, as the promotion pipeline records one."""
    approval_id = f"approval-{new_id()[:8]}"
    approved = c.ProductionApproved(
        approval_id=approval_id, candidate_id=candidate_id, evidence_fingerprint="tests", evidence={},
        approved_by="tests", reason="canary tests",
    )  # fmt: skip
    await stack.store.append(Aggregate.APPROVAL, approval_id, [approved], ExpectedVersion.NO_STREAM)


async def admin_post(stack: Stack, path: str, body: dict[str, object]) -> httpx.Response:
    async with stack_admin(stack, OPERATOR) as admin:
        return await admin.post(path, json=body)


async def served_by(stack: Stack, request_ids: list[str], text: str = "a cat on a mat") -> list[str]:
    """The deployment each request was served by, a few at a time."""
    served: list[str] = []
    for start in range(0, len(request_ids), 16):
        chunk = request_ids[start : start + 16]
        answers = await asyncio.gather(*(serve_directly(stack, rid, [text]) for rid in chunk))
        served += [answer.deployment_id for answer in answers]
    return served


async def test_weights_90_10_split_a_seeded_stream_within_a_binomial_bound(stack: Stack) -> None:
    experiment = await routed_experiment(stack, "minilm-canary")
    weights = {stack.deployment_id: 90, experiment: 10}
    answer = await admin_post(stack, "/routing", {"capability": EMBEDDING, "weights": weights})
    assert answer.status_code == 200, answer.text
    assert answer.json()["weights"] == weights
    seeded = random.Random(20261204)
    n = 300
    request_ids = [f"split-{seeded.getrandbits(64):016x}" for _ in range(n)]

    served = await served_by(stack, request_ids)

    assert served == [choose(weights, stack.deployment_id, bucket_of(EMBEDDING, rid)) for rid in request_ids]
    assert abs(served.count(experiment) - 0.1 * n) <= 5 * math.sqrt(n * 0.1 * 0.9)
    await stack.gateway.settled()
    recorded = await _completions(stack, set(request_ids))
    assert [recorded[rid] for rid in request_ids] == served  # as the request events say too


async def test_a_share_for_an_unapproved_experiment_is_refused_and_changes_nothing(stack: Stack) -> None:
    experiment = await another_deployment(stack, "minilm-unapproved", "minilm-unapproved")
    before = live_of(stack).catalog.deployments[stack.deployment_id].weights
    refused = await admin_post(stack, f"/experiments/{experiment}/share", {"weight": 10})
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "ROUTING_TARGET_INVALID"
    assert live_of(stack).catalog.deployments[stack.deployment_id].weights == before


async def test_weights_not_summing_to_100_are_refused_and_change_nothing(stack: Stack) -> None:
    experiment = await routed_experiment(stack, "minilm-canary")
    before = live_of(stack).catalog.deployments[stack.deployment_id].weights
    refused = await admin_post(
        stack, "/routing", {"capability": EMBEDDING, "weights": {stack.deployment_id: 90, experiment: 20}}
    )
    assert refused.status_code == 422
    assert refused.json()["error"]["code"] == "ROUTING_WEIGHTS_INVALID"
    assert live_of(stack).catalog.deployments[stack.deployment_id].weights == before


async def test_a_failing_experiment_trips_its_guard_once_and_its_weight_returns_to_0(stack: Stack) -> None:
    experiment = await _poisoned_experiment(stack)
    policy = {
        "guards": [{"kind": "invalid_output_count", "threshold": 3, "window_s": 600}],
        "on_trip": "unload",
    }
    answer = await admin_post(stack, f"/experiments/{experiment}/rollback-policy", policy)
    assert answer.status_code == 200, answer.text
    answer = await admin_post(stack, f"/experiments/{experiment}/share", {"weight": 50})
    assert answer.status_code == 200, answer.text
    other = InProcessGateway()  # a second replica judging its own requests: one of them rolls back
    await other.start(stack.nats_url)
    try:
        await _until_taken_back(stack, other, experiment)
    finally:
        await other.stop()

    events = await events_until(stack.connection, subjects.EVENTS_STREAM, _unloaded(experiment), timeout=120)
    trips = [
        e
        for e in events
        if isinstance(e, s.RoutingWeightsChanged)
        and e.guard is not None
        and e.guard.experiment_id == experiment
    ]
    assert len(trips) == 1
    (trip,) = trips
    assert trip.weights[experiment] == 0
    assert trip.weights[stack.deployment_id] == 100
    assert trip.guard is not None
    assert (trip.guard.experiment_id, trip.guard.guard.kind) == (experiment, "invalid_output_count")
    assert trip.guard.observed > 3
    assert "invalid_output_count" in trip.reason
    deactivated = [
        e for e in events if isinstance(e, s.ExperimentDeactivated) and e.deployment_id == experiment
    ]
    assert len(deactivated) == 1
    after = await served_by(stack, [f"after-{new_id()[:8]}" for _ in range(16)], f"a {POISON} apple")
    assert set(after) == {stack.deployment_id}


async def test_a_replay_reproduces_the_routing_state(stack: Stack) -> None:
    experiment = await routed_experiment(stack, "minilm-canary")
    answer = await admin_post(stack, f"/experiments/{experiment}/share", {"weight": 30, "sticky": True})
    assert answer.status_code == 200, answer.text
    policy = {"guards": [{"kind": "error_rate", "threshold": 0.05, "window_s": 120, "min_requests": 50}]}
    assert (await admin_post(stack, f"/experiments/{experiment}/rollback-policy", policy)).status_code == 200
    replayed = InProcessGateway()  # folds the whole log from its start
    await replayed.start(stack.nats_url)
    try:
        assert replayed.replica is not None
        again, live = replayed.replica.edge.ctx.live, live_of(stack)
        assert await again.wait_for(lambda: again.applied >= live.applied, 30)
        for deployment_id in (stack.deployment_id, experiment):
            ours, theirs = live.catalog.deployments[deployment_id], again.catalog.deployments[deployment_id]
            assert (theirs.weights, theirs.sticky, theirs.rollback) == (
                ours.weights,
                ours.sticky,
                ours.rollback,
            )
        keys = [(f"client-{i}", f"request-{i}") for i in range(100)]
        assert [_chosen(again, k) for k in keys] == [_chosen(live, k) for k in keys]
    finally:
        await replayed.stop()


def _chosen(live: LiveState, key: tuple[str, str]) -> str:
    chosen = live.catalog.resolve(EMBEDDING, "", RoutingKey(*key))
    assert chosen is not None
    return chosen.deployment_id


async def _poisoned_experiment(stack: Stack, name: str = "poisoned") -> str:
    """An experiment of an embedder that answers POISON with non-finite vectors, probed on the
    stack's node and routed as `name`."""
    write_poisoned_embedder(stack.root / name, stack.root / MINILM, POISON)
    artifacts = await register_artifacts(stack.store, stack.node, stack.root, name)
    measured = await probe(stack.connection, stack.node, artifacts, stack.root)
    experiment = await promote(stack.store, artifacts, measured, route=name)
    await approve_for_production(stack, measured.candidate_id)
    live = live_of(stack)
    assert await live.wait_for(lambda: experiment in live.catalog.deployments, 10)
    return experiment


async def test_a_count_guard_trips_on_the_fleets_total_though_no_replica_saw_its_threshold(
    stack: Stack,
) -> None:
    experiment = await _guarded_with_all_traffic(stack, "poisoned-fleet", threshold=3)
    other = InProcessGateway()
    await other.start(stack.nats_url)
    try:
        for attempt in range(4):  # alternated: each replica serves 2 bad answers, the fleet 4 > 3
            await _poisoned(stack, [stack.gateway, other][attempt % 2])
        events = await events_until(
            stack.connection, subjects.EVENTS_STREAM, _unloaded(experiment), timeout=120
        )
    finally:
        await other.stop()
    trip = _the_one_trip(events, experiment)
    assert trip.weights == {stack.deployment_id: 100, experiment: 0}
    assert trip.guard is not None
    assert (trip.guard.observed, trip.guard.experiment_requests) == (4, 4)


async def test_a_replica_started_after_the_failures_still_counts_them(stack: Stack) -> None:
    experiment = await _guarded_with_all_traffic(stack, "poisoned-late", threshold=3)
    for _ in range(3):  # the threshold, not past it: nothing trips yet
        await _poisoned(stack, stack.gateway)
    late = InProcessGateway()
    await late.start(stack.nats_url)
    try:
        assert late.replica is not None
        outcomes = late.replica.edge.ctx.outcomes
        async with asyncio.timeout(30):
            while len(outcomes.of(experiment)) < 3:  # the window, recovered from MF_REQUESTS
                await outcomes.changed.wait()
                await asyncio.sleep(0)  # (its guard loop takes the change)
        assert {o.code for o in outcomes.of(experiment)} == {"INVALID_OUTPUT"}
        await _poisoned(stack, late)
        events = await events_until(
            stack.connection, subjects.EVENTS_STREAM, _unloaded(experiment), timeout=120
        )
    finally:
        await late.stop()
    trip = _the_one_trip(events, experiment)
    assert trip.guard is not None
    assert trip.guard.observed == 4


async def _guarded_with_all_traffic(stack: Stack, name: str, threshold: int) -> str:
    """A poisoned experiment under an `invalid_output_count` guard, taking all of the traffic."""
    experiment = await _poisoned_experiment(stack, name)
    policy = {"guards": [{"kind": "invalid_output_count", "threshold": threshold, "window_s": 600}]}
    answer = await admin_post(stack, f"/experiments/{experiment}/rollback-policy", policy)
    assert answer.status_code == 200, answer.text
    answer = await admin_post(stack, f"/experiments/{experiment}/share", {"weight": 100})
    assert answer.status_code == 200, answer.text
    return experiment


async def _poisoned(stack: Stack, replica: InProcessGateway) -> None:
    """One poisoned request served by `replica`: the experiment answers it INVALID_OUTPUT."""
    with pytest.raises(ServingError) as refused:
        await serve_directly(
            msgspec.structs.replace(stack, gateway=replica), f"poisoned-{new_id()[:8]}", [f"a {POISON} apple"]
        )
    assert refused.value.code == "INVALID_OUTPUT", refused.value


def _the_one_trip(events: list[object], experiment: str) -> s.RoutingWeightsChanged:
    trips = [
        e
        for e in events
        if isinstance(e, s.RoutingWeightsChanged)
        and e.guard is not None
        and e.guard.experiment_id == experiment
    ]
    assert len(trips) == 1, trips
    return trips[0]


async def _until_taken_back(stack: Stack, other: InProcessGateway, experiment: str) -> None:
    """Poisoned requests, alternating between the two replicas, until the split gives the
    experiment nothing."""
    live = live_of(stack)
    replicas = [stack.gateway, other]
    for attempt in range(200):
        if live.catalog.deployments[stack.deployment_id].weights.get(experiment, 0) == 0:
            return
        try:
            await serve_directly(
                msgspec.structs.replace(stack, gateway=replicas[attempt % 2]),
                f"poisoned-{new_id()[:8]}",
                [f"a {POISON} apple"],
            )
        except ServingError as failed:
            assert failed.code == "INVALID_OUTPUT", failed
    raise AssertionError("the guard never took the experiment's share back")


def _unloaded(experiment: str) -> object:
    return lambda e: isinstance(e, s.ResidencyUnloaded) and e.deployment_id == experiment


async def _completions(stack: Stack, request_ids: set[str]) -> dict[str, str]:
    """request id -> the deployment its RequestCompleted names, for every one of `request_ids`."""
    found: dict[str, str] = {}

    def collect(event: object) -> bool:
        if isinstance(event, RequestCompleted | RequestFailed) and event.request_id in request_ids:
            found[event.request_id] = event.deployment_id
        return len(found) == len(request_ids)

    await events_until(stack.connection, subjects.REQUESTS_STREAM, collect, timeout=60)
    return found


async def test_the_canary_verbs_drive_a_release_as_an_operator_runs_them(stack: Stack, scratch: Path) -> None:
    experiment = await routed_experiment(stack, "minilm-canary")
    assert stack.gateway.replica is not None
    stack.gateway.replica.edge.operator_token = VERBS_TOKEN

    policy = await modelforge(
        stack, scratch, "canary", "policy", experiment, "--guard", "error_rate=0.1,min=30"
    )
    assert policy.status == 0, policy.stderr
    assert json.loads(policy.stdout)["rollback_policy"]["guards"][0]["min_requests"] == 30
    shared = await modelforge(stack, scratch, "canary", "share", experiment, "20", "--sticky")
    assert shared.status == 0, shared.stderr
    assert (
        shared.stdout.strip()
        == f"{EMBEDDING}: {stack.deployment_id} 80%, {experiment} 20% (sticky per client)"
    )
    listed = await modelforge(stack, scratch, "canary", "list", "--json")
    assert {experiment: 20, stack.deployment_id: 80} in [
        split["weights"] for split in json.loads(listed.stdout)
    ]
    refused = await modelforge(
        stack, scratch, "canary", "weights", EMBEDDING, f"{stack.deployment_id}=90", f"{experiment}=20"
    )
    assert refused.status != 0
    assert "ROUTING_WEIGHTS_INVALID" in refused.stderr
    paused = await modelforge(stack, scratch, "canary", "pause", experiment, "--reason", "looking into it")
    assert paused.status == 0, paused.stderr
    assert live_of(stack).catalog.deployments[stack.deployment_id].weights[experiment] == 0
    assert live_of(stack).catalog.deployments[experiment].active  # paused: still loaded and routable


async def test_every_canary_command_on_an_unknown_experiment_is_404(stack: Stack) -> None:
    for verb, body in [
        ("share", {"weight": 10}),
        ("rollback-policy", {"guards": []}),
        ("promote", {}),
        ("pause", {}),
        ("abort", {}),
    ]:
        answer = await admin_post(stack, f"/experiments/exp-nowhere/{verb}", body)
        assert answer.status_code == 404, (verb, answer.text)
        assert answer.json()["error"]["code"] == "EXPERIMENT_NOT_FOUND"
