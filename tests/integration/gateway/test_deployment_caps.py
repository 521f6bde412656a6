"""A deployment's caps through two gateway processes sharing NATS: never more than its
`max_concurrency` requests in flight (read from the leases on the record), the overflow waiting in
its queue and, past `max_queue_depth`, refused QUEUE_FULL; set by an operator with validation.
Each request runs on its own here: requests sharing a run (`gateway.serving.coalescing`) are one
run to the caps."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from eventstore import reading
from eventstore.store import ExpectedVersion
from gateway.admin.client import TOKEN_ENV, URL_ENV
from gateway.clients.limits import RequestLimiter
from gateway.clients.permit import Permit
from gateway.process import COALESCE_AFTER_ENV
from modelforge.cli import main
from streams import subjects
from streams.events import serving as s
from streams.subjects import Aggregate
from tests.integration.gateway.conftest import (
    Stack,
    TwoGateways,
    another_deployment,
    stack_admin,
    two_gateways,
)
from tests.support.serving import events_until

TOKEN = "operator-token-for-caps-tests"


@pytest.fixture(scope="module")
async def gateways(stack: Stack, scratch: Path) -> AsyncIterator[TwoGateways]:
    async with two_gateways(stack, scratch, {COALESCE_AFTER_ENV: "0"}) as both:
        yield both


@pytest.fixture
async def admin(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    async with stack_admin(stack, TOKEN) as http:
        yield http


@pytest.fixture(scope="module")
async def capped(stack: Stack) -> str:
    """An experiment of its own (not resident yet), reached by the model name `capped`."""
    return await another_deployment(stack, "minilm-capped", "capped")


async def _set_caps(gateways: TwoGateways, deployment_id: str, concurrency: int, queue_depth: int) -> None:
    """The caps, recorded; returns once both gateways have applied them."""
    caps = s.DeploymentCaps(max_concurrency=concurrency, max_queue_depth=queue_depth)
    changed = s.DeploymentCapsChanged(deployment_id=deployment_id, caps=caps)
    seq = await gateways.store.append(Aggregate.DEPLOYMENT, deployment_id, [changed], ExpectedVersion.ANY)
    async with httpx.AsyncClient(timeout=30) as http:
        for url in gateways.urls:
            assert (await http.get(f"{url}/readyz", params={"applied": seq})).status_code == 200


async def _embed(gateways: TwoGateways, http: httpx.AsyncClient, i: int) -> httpx.Response:
    return await http.post(
        f"{gateways.urls[i % 2]}/v1/embeddings",
        json={"input": f"capped {i}", "model": "capped"},
        headers={"authorization": f"Bearer {gateways.key}"},
    )


async def _release(permits: list[Permit | None]) -> None:
    for permit in permits:
        if permit is not None:
            await permit.release()  # (a second release does nothing)


def _most_in_flight(events: list[object], deployment_id: str) -> tuple[int, int]:
    """The most of the deployment's leases held at once, in the record's order, and how many
    were granted."""
    held: set[str] = set()
    granted = most = 0
    for event in events:
        if isinstance(event, s.LeaseGranted) and event.deployment_id == deployment_id:
            held.add(event.lease_id)
            granted += 1
            most = max(most, len(held))
        elif isinstance(event, (s.LeaseReleased, s.LeaseExpired)):
            held.discard(event.lease_id)
    return most, granted


async def test_a_deployment_never_has_more_than_its_max_concurrency_in_flight_across_two_gateways(
    stack: Stack, gateways: TwoGateways, capped: str
) -> None:
    await _set_caps(gateways, capped, concurrency=2, queue_depth=64)
    requests = 16
    async with httpx.AsyncClient(timeout=120) as http:
        responses = await asyncio.gather(*(_embed(gateways, http, i) for i in range(requests)))
    assert [r.status_code for r in responses] == [200] * requests, [
        r.text for r in responses if r.status_code != 200
    ]

    released: set[str] = set()
    granted: set[str] = set()

    def all_released(event: object) -> bool:  # every lease of these requests given back
        if isinstance(event, s.LeaseGranted) and event.deployment_id == capped:
            granted.add(event.lease_id)
        elif isinstance(event, (s.LeaseReleased, s.LeaseExpired)) and event.lease_id in granted:
            released.add(event.lease_id)
        return len(released) >= requests

    events = await events_until(stack.connection, subjects.EVENTS_STREAM, all_released, timeout=60)
    most, leases = _most_in_flight(events, capped)
    assert leases == requests
    assert 1 <= most <= 2


async def test_requests_past_a_deployments_queue_depth_are_refused_queue_full_and_the_queued_ones_run(
    stack: Stack, gateways: TwoGateways, capped: str
) -> None:
    await _set_caps(gateways, capped, concurrency=2, queue_depth=2)
    # Both run slots held (as a third replica's requests would hold them): two requests may wait.
    holder = RequestLimiter(stack.connection.client)
    run = subjects.deployment_slots(capped, "run")
    held = [await holder.take_slot(run, 2), await holder.take_slot(run, 2)]
    try:
        async with httpx.AsyncClient(timeout=120) as http:
            pending = {asyncio.ensure_future(_embed(gateways, http, i)) for i in range(6)}
            refused = []
            while len(refused) < 4:  # the four past the queue's two places are answered at once
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                refused += [task.result() for task in done]
            assert len(pending) == 2, [r.text for r in refused]  # waiting in the deployment's queue
            await _release(held)
            served = await asyncio.gather(*pending)
    finally:
        await _release(held)
    assert [(r.status_code, r.json()["error"]["code"]) for r in refused] == [(429, "QUEUE_FULL")] * 4
    assert all(r.headers["retry-after"] for r in refused)
    assert [r.status_code for r in served] == [200, 200]
    # refused as a client's limits refuse: one RequestRejected each, never accepted
    ids = {r.json()["error"]["request_id"] for r in refused}
    rejected: dict[str, list[str]] = {}

    def all_recorded(event: object) -> bool:
        request_id = getattr(event, "request_id", None)
        if request_id in ids:
            rejected.setdefault(request_id, []).append(type(event).__name__)
        return len(rejected) == len(ids) and all("RequestRejected" in kinds for kinds in rejected.values())

    await events_until(stack.connection, subjects.REQUESTS_STREAM, all_recorded, timeout=60)
    assert all(kinds == ["RequestRejected"] for kinds in rejected.values()), rejected


async def test_a_request_queued_past_its_deadline_times_out_and_gives_its_place_back(
    stack: Stack, gateways: TwoGateways, capped: str
) -> None:
    await _set_caps(gateways, capped, concurrency=1, queue_depth=1)
    holder = RequestLimiter(stack.connection.client)
    held = [await holder.take_slot(subjects.deployment_slots(capped, "run"), 1)]
    headers = {"authorization": f"Bearer {gateways.key}", "x-request-timeout-ms": "1500"}
    try:
        async with httpx.AsyncClient(timeout=60) as http:
            answers = []
            for i in range(2):  # the second finds the one place free again: it waits, it is not refused
                answers.append(
                    await http.post(
                        f"{gateways.urls[i % 2]}/v1/embeddings",
                        json={"input": f"late {i}", "model": "capped"},
                        headers=headers,
                    )
                )
    finally:
        await _release(held)
    assert [(r.status_code, r.json()["error"]["code"]) for r in answers] == [(504, "REQUEST_TIMEOUT")] * 2


async def test_an_operator_sets_a_deployments_caps_and_bad_values_change_nothing(
    stack: Stack, admin: httpx.AsyncClient, capped: str
) -> None:
    changed = await admin.post(
        f"/deployments/{capped}/caps", json={"max_concurrency": 3, "max_queue_depth": 5}
    )
    assert changed.status_code == 200, changed.text
    assert changed.json()["caps"] == {"max_concurrency": 3, "max_queue_depth": 5}
    for body in ({"max_concurrency": -1}, {"max_queue_depth": 10_001}, {"max_concurrency": "two"}):
        bad = await admin.post(f"/deployments/{capped}/caps", json=body)
        assert bad.status_code == 422, bad.text
        assert bad.json()["error"]["code"] == "INVALID_INPUT"
    records = await reading.read_subject_range(
        stack.connection.client,
        subjects.EVENTS_STREAM,
        subjects.aggregate_filter(Aggregate.DEPLOYMENT, capped),
    )
    caps = [r.event.caps for r in records if isinstance(r.event, s.DeploymentCapsChanged)]
    assert caps[-1] == s.DeploymentCaps(max_concurrency=3, max_queue_depth=5)  # the good change, and no other


async def test_the_cli_sets_a_deployments_caps_and_reports_a_bad_value_by_its_code(
    stack: Stack,
    admin: httpx.AsyncClient,
    capped: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(URL_ENV, stack.gateway.url)
    monkeypatch.setenv(TOKEN_ENV, TOKEN)  # the admin fixture made it the gateway's operator token
    caps = ["deployments", "caps", capped]
    # The CLI's client is synchronous: off this loop, which serves the gateway.
    assert await asyncio.to_thread(main, [*caps, "--max-concurrency", "4", "--max-queue-depth", "8"]) == 0
    assert '"max_concurrency": 4' in capsys.readouterr().out
    assert await asyncio.to_thread(main, [*caps, "--max-queue-depth", "-2"]) == 1
    assert "INVALID_INPUT" in capsys.readouterr().err
    shown = await admin.get(f"/deployments/{capped}")
    assert shown.json()["caps"] == {"max_concurrency": 4, "max_queue_depth": 8}
