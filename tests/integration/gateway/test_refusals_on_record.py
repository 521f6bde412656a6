"""Placement refusals are on the record without flooding it: a storm of refused requests is a few
`PlacementRejected` events whose counts add up, shown by the placement history and counted by the
scheduler's metrics; a dry run's refusal is recorded marked as one."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import msgspec
import pytest

from eventstore import reading
from eventstore.store import ExpectedVersion
from gateway.admin.scheduler import dry_run
from streams import subjects
from streams.codes import ServingError
from streams.envelope import new_id
from streams.events import serving as s
from streams.subjects import Aggregate
from tests.integration.gateway.conftest import Stack, coalescing_after, serve_directly, stack_admin
from tests.integration.projections.helpers import projecting

TOKEN = "operator-token-for-refusal-tests"
BEYOND_ANY_GPU = 1 << 50  # a petabyte: no accelerator can hold it
REFUSED = "REJECT_INSUFFICIENT_CAPACITY"


async def oversized_deployment(stack: Stack, route: str) -> str:
    """An experiment of the stack's model, reached by `route`, whose envelope no accelerator holds."""
    assert stack.gateway.replica is not None
    live = stack.gateway.replica.edge.ctx.live
    model = live.catalog.deployments[stack.deployment_id]
    deployment_id = f"dep-{new_id()[:10]}"
    envelope = s.ResourceEnvelope(
        required_bytes=BEYOND_ANY_GPU, peak_bytes=BEYOND_ANY_GPU, per_request_bytes=1 << 20, cold_load_ms=1.0
    )
    created = s.ExperimentCreated(
        deployment_id=deployment_id,
        capability="rag.embedding@1",
        candidate_id=model.candidate_id,
        artifact_set_id=model.artifact_set_id,
        model_name=route,
        route=route,
        envelope=envelope,
        embedding_space=model.embedding_space,
    )
    activated = s.ExperimentActivated(deployment_id=deployment_id)
    await stack.store.append(
        Aggregate.DEPLOYMENT,
        deployment_id,
        # no cap of its own (an experiment runs one at a time): the storm reaches placement
        [created, s.DeploymentCapsChanged(deployment_id=deployment_id, caps=s.DeploymentCaps()), activated],
        ExpectedVersion.NO_STREAM,
    )

    def routed() -> str:
        found = live.catalog.resolve("rag.embedding@1", route)
        return found.deployment_id if found else ""

    assert await live.wait_for(lambda: routed() == deployment_id, 10)
    # refused outright, not queued while the accelerator's attribution is not yet known
    oversized = live.catalog.deployments[deployment_id]
    assert await live.wait_for(lambda: dry_run(live, oversized, "lab").verdict == REFUSED, 30)
    return deployment_id


async def refused(stack: Stack, route: str, times: int) -> list[str]:
    """`times` requests for `route` at once, each decided on its own (requests sharing a run are
    one decision); the codes they were refused with."""

    async def one() -> str:
        with pytest.raises(ServingError) as refusal:
            await serve_directly(stack, new_id(), ["x"], model=route)
        return refusal.value.code

    async with coalescing_after(stack, 0):
        return await asyncio.gather(*(one() for _ in range(times)))


async def recorded_refusals(stack: Stack, deployment_id: str) -> list[s.PlacementRejected]:
    await stack.gateway.settled()  # the open windows are written
    records = await reading.read_subject_range(
        stack.connection.client,
        subjects.EVENTS_STREAM,
        f"{subjects.EVENTS_PREFIX}.accelerator.*.PlacementRejected",
    )
    return [
        r.event
        for r in records
        if isinstance(r.event, s.PlacementRejected) and r.event.deployment_id == deployment_id
    ]


async def test_a_storm_of_refused_requests_is_a_few_events_whose_counts_add_up(stack: Stack) -> None:
    deployment_id = await oversized_deployment(stack, "oversized-storm")

    codes = await refused(stack, "oversized-storm", 300)

    assert codes.count("INSUFFICIENT_SCHEDULABLE_VRAM") >= 1
    events = await recorded_refusals(stack, deployment_id)
    # one event per kind of refusal and window (1 s), however many refusals it counts
    assert 1 <= len(events) < 300 // 10
    assert sum(e.count for e in events if e.verdict.startswith("REJECT_")) == 300  # each request once
    assert not any(e.dry_run for e in events)
    assert all(e.required_bytes >= BEYOND_ANY_GPU and e.schedulable_bytes is not None for e in events)


async def test_a_refused_dry_run_is_recorded_as_a_dry_run(stack: Stack) -> None:
    deployment_id = await oversized_deployment(stack, "oversized-dry-run")
    assert stack.gateway.replica is not None
    stack.gateway.replica.edge.operator_token = TOKEN
    async with httpx.AsyncClient(
        base_url=f"{stack.gateway.url}/admin/v1", headers={"authorization": f"Bearer {TOKEN}"}
    ) as admin:
        plan = await admin.post("/scheduler/dry-run", json={"deployment_id": deployment_id, "channel": "lab"})
    assert plan.status_code == 200, plan.text
    assert plan.json()["verdict"].startswith("REJECT_")

    [event] = await recorded_refusals(stack, deployment_id)

    assert (event.dry_run, event.count, event.verdict) == (True, 1, plan.json()["verdict"])


async def history_and_metrics(stack: Stack, database: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The placement history and the scheduler's metrics, once a projector has brought the read
    model up to what the stack's gateway has written."""
    await stack.gateway.settled()
    async with projecting(database, stack.nats_url), stack_admin(stack, TOKEN) as admin:
        history = msgspec.json.decode((await admin.get("/scheduler/placements?limit=1000")).content)
        metrics = (await admin.get("/scheduler/metrics")).json()
    return history, metrics


async def test_the_placement_history_shows_counted_refusals_and_the_metrics_sum_them(
    stack: Stack, read_model_database: str
) -> None:
    deployment_id = await oversized_deployment(stack, "oversized-history")
    await refused(stack, "oversized-history", 120)

    history, metrics = await history_and_metrics(stack, read_model_database)

    mine = [row for row in history if row["deployment_id"] == deployment_id]
    assert sum(row["decisions"] for row in mine if row["verdict"].startswith("REJECT_")) == 120
    refusals = [row for row in history if row["verdict"].startswith("REJECT_") and not row["dry_run"]]
    assert metrics["counters"]["rejections"] == sum(row["decisions"] for row in refusals)


async def test_dry_runs_that_would_admit_are_a_few_counted_events_in_the_history_and_no_admissions(
    stack: Stack, read_model_database: str
) -> None:
    assert stack.gateway.replica is not None
    stack.gateway.replica.edge.operator_token = TOKEN
    plan = {"deployment_id": stack.deployment_id, "channel": "production"}
    async with httpx.AsyncClient(
        base_url=f"{stack.gateway.url}/admin/v1", headers={"authorization": f"Bearer {TOKEN}"}, timeout=60
    ) as admin:
        plans = [(await admin.post("/scheduler/dry-run", json=plan)).json() for _ in range(40)]
    assert all(p["verdict"].startswith("ADMIT") for p in plans), plans[0]

    history, metrics = await history_and_metrics(stack, read_model_database)

    records = await reading.read_subject_range(
        stack.connection.client,
        subjects.EVENTS_STREAM,
        f"{subjects.EVENTS_PREFIX}.accelerator.*.PlacementDryRun",
    )
    events = [r.event for r in records if isinstance(r.event, s.PlacementDryRun)]
    assert [e.deployment_id for e in events] == [stack.deployment_id] * len(events)
    assert 1 <= len(events) < 40  # counted in windows, not one event each
    assert sum(e.count for e in events) == 40
    rows = [row for row in history if row["deployment_id"] == stack.deployment_id and row["dry_run"]]
    assert sum(row["decisions"] for row in rows) == 40
    assert {row["verdict"] for row in rows} == {p["verdict"] for p in plans}
    admitted = [row for row in history if row["verdict"].startswith("ADMIT") and not row["dry_run"]]
    assert metrics["counters"]["admissions"] == len(admitted)
