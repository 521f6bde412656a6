"""Client limits, revocation and the global queue through two gateway processes sharing NATS:
exact across replicas, and client limits checked beside the capacity search only for a client far
from them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime

import httpx
import msgspec

from eventstore.store import ExpectedVersion
from gateway.clients.service import ClientService
from streams import subjects
from streams.envelope import new_id
from streams.events import control as c
from streams.events import serving as s
from streams.events.requests import RequestAccepted, RequestRejected
from streams.messages import QueueDepth
from streams.subjects import Aggregate
from tests.integration.gateway.conftest import Stack, TwoGateways, ready_through
from tests.support.events import lease_granted
from tests.support.serving import events_until, folded_through, revise_policy


async def _inside_one_rate_window(seconds_needed: float = 15) -> None:
    """Start where a test's requests all count in one rate window (minutes of the UTC clock)."""
    if (left := 60 - time.time() % 60) < seconds_needed:
        await asyncio.sleep(left + 0.5)


def _all_released(request_ids: set[str]) -> Callable[[object], bool]:
    """True at the event that releases the last of the leases these requests were granted."""
    held: set[str] = set()
    granted = 0

    def last(event: object) -> bool:
        nonlocal granted
        if isinstance(event, s.LeaseGranted) and event.request_id in request_ids:
            held.add(event.lease_id)
            granted += 1
        elif isinstance(event, s.LeaseReleased):
            held.discard(event.lease_id)
        return granted == len(request_ids) and not held

    return last


async def test_a_clients_rate_limit_is_exact_across_two_gateways(gateways: TwoGateways) -> None:
    issued = await ClientService(gateways.store).create(
        f"rpm-{new_id()[:6]}", ["rag.embedding@1"], requests_per_minute=10, max_concurrency=100
    )
    await ready_through(gateways.urls, issued.sequence, 5)
    await _inside_one_rate_window()
    headers = {"authorization": f"Bearer {issued.key}"}

    async def one(i: int, http: httpx.AsyncClient) -> httpx.Response:
        url = gateways.urls[i % 2]
        return await http.post(
            f"{url}/v1/embeddings", json={"input": f"t{i}", "model": "all-MiniLM-L6-v2"}, headers=headers
        )

    async with httpx.AsyncClient(timeout=60) as http:
        responses = await asyncio.gather(*(one(i, http) for i in range(25)))
    limited = [r for r in responses if r.status_code == 429 and r.json()["error"]["code"] == "RATE_LIMITED"]
    assert len(limited) == 15
    assert all("retry-after" in r.headers for r in limited)


async def test_a_clients_concurrency_limit_holds_across_two_gateways(gateways: TwoGateways) -> None:
    issued = await ClientService(gateways.store).create(
        f"conc-{new_id()[:6]}", ["rag.embedding@1"], requests_per_minute=10_000, max_concurrency=2
    )
    await ready_through(gateways.urls, issued.sequence, 5)
    headers = {"authorization": f"Bearer {issued.key}"}

    async def one(i: int, http: httpx.AsyncClient) -> httpx.Response:
        return await http.post(
            f"{gateways.urls[i % 2]}/v1/embeddings",
            json={"input": f"at once {i}", "model": "all-MiniLM-L6-v2"},  # as small as the fixture's warm-up
            headers=headers,
        )

    async with httpx.AsyncClient(timeout=60) as http:
        responses = await asyncio.gather(*(one(i, http) for i in range(12)))
    codes = [r.json()["error"]["code"] if r.status_code != 200 else "OK" for r in responses]
    # Twelve at once against two slots: some wait their turn nowhere, they are refused.
    assert set(codes) <= {"OK", "QUEUE_FULL"}, codes
    assert codes.count("QUEUE_FULL") >= 1, codes
    assert codes.count("OK") >= 2, codes
    assert all(r.headers["retry-after"] for r in responses if r.status_code == 429)


async def test_a_revoked_key_is_refused_by_both_gateways_within_a_second(gateways: TwoGateways) -> None:
    service = ClientService(gateways.store)
    issued = await service.create(f"rev-{new_id()[:6]}", ["rag.embedding@1"], requests_per_minute=1000)
    await ready_through(gateways.urls, issued.sequence, 5)
    headers = {"authorization": f"Bearer {issued.key}"}
    async with httpx.AsyncClient(timeout=60) as http:
        for url in gateways.urls:
            ok = await http.post(
                f"{url}/v1/embeddings", json={"input": "x", "model": "all-MiniLM-L6-v2"}, headers=headers
            )
            assert ok.status_code != 401  # admitted (served, or refused for capacity after the burst above)
        revoked_at = await service.revoke(issued.client_id, issued.credential_id, "leaked")
        await ready_through(gateways.urls, revoked_at, 1.0)
        for url in gateways.urls:
            refused = await http.post(
                f"{url}/v1/embeddings", json={"input": "x", "model": "all-MiniLM-L6-v2"}, headers=headers
            )
            assert refused.status_code == 401
            assert refused.json()["error"]["code"] == "CAPABILITY_NOT_AUTHORIZED"


async def test_a_client_far_from_its_limits_is_checked_alongside_capacity_and_near_them_first(
    gateways: TwoGateways,
) -> None:
    issued = await ClientService(gateways.store).create(
        f"spec-{new_id()[:6]}", ["rag.embedding@1"], requests_per_minute=4, max_concurrency=100
    )
    await ready_through(gateways.urls, issued.sequence, 5)
    await _inside_one_rate_window()
    a, b = gateways.urls
    ids: dict[str, str] = {}  # what the gateways named each call

    async def call(url: str, name: str, key: str = issued.key) -> httpx.Response:
        async with httpx.AsyncClient(timeout=60) as http:
            response = await http.post(
                f"{url}/v1/embeddings",
                json={"input": name, "model": "all-MiniLM-L6-v2"},
                headers={"authorization": f"Bearer {key}"},
            )
        ids[name] = response.headers["x-request-id"]
        return response

    assert (await call(a, "first")).status_code == 200  # gateway A has now seen 1 of 4
    for name in ("b1", "b2", "b3"):  # gateway B spends the rest of the minute's budget
        assert (await call(b, name)).status_code == 200
    # A's lease then lands at once, ahead of the check's refusal: A's view holds B's leases and
    # their release (else A's append would meet them as a conflict and be tried again).
    await folded_through(gateways.connection, [a], _all_released({ids[n] for n in ("b1", "b2", "b3")}))
    refused = await call(a, "overlapped")  # A's view says far: its check runs beside capacity
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "RATE_LIMITED"
    checked_first = await call(a, "checked-first")  # A has now seen the refusal
    assert checked_first.status_code == 429
    marker = await call(a, "marker", gateways.key)  # leased after anything A staged before it
    assert marker.status_code == 200

    leases = await events_until(
        gateways.connection,
        subjects.EVENTS_STREAM,
        lambda e: isinstance(e, s.LeaseGranted) and e.request_id == ids["marker"],
    )
    granted = {e.request_id: e for e in leases if isinstance(e, s.LeaseGranted)}
    assert ids["checked-first"] not in granted  # near its limits: refused before any lease
    lease = granted[ids["overlapped"]]  # the lease the refusal gave back
    released = await events_until(
        gateways.connection,
        subjects.EVENTS_STREAM,
        lambda e: isinstance(e, s.LeaseReleased) and e.lease_id == lease.lease_id,
    )
    assert released[-1].outcome == "cancelled"  # type: ignore[attr-defined]

    def about(name: str) -> Callable[[object], bool]:
        return lambda e: getattr(e, "request_id", None) == ids[name] and isinstance(e, RequestRejected)

    for name in ("overlapped", "checked-first"):
        recorded = await events_until(gateways.connection, subjects.REQUESTS_STREAM, about(name))
        assert recorded[-1].code == "RATE_LIMITED"  # type: ignore[attr-defined]
        accepted = [e for e in recorded if isinstance(e, RequestAccepted) and e.request_id == ids[name]]
        assert not accepted  # a refusal is the request's only event, checked first or alongside


async def test_the_queue_limit_counts_the_requests_waiting_on_every_gateway(
    gateways: TwoGateways, stack: Stack
) -> None:
    accelerator = f"{stack.node}-cpu0"
    # A lease holding more than the device: requests wait for it to end (on a roomy device, where
    # they are served once it has).
    blocker = lease_granted(
        f"blocker-{new_id()[:6]}",
        accelerator,
        datetime.fromtimestamp(time.time() + 120, UTC),
        reserved_bytes=1 << 50,
        deployment_id=stack.deployment_id,
    )
    await stack.store.append(Aggregate.ACCELERATOR, accelerator, [blocker], ExpectedVersion.ANY)
    revisions, _ = await stack.store.load(Aggregate.SCHEDULER_POLICY, "default")
    urls = [*gateways.urls, stack.gateway.url]
    await revise_policy(
        stack.store,
        urls,
        c.SchedulerPolicyRevised(revision=len(revisions) + 1, settings={"global_queue_limit": 2}),
    )
    announcements = await stack.connection.client.subscribe(f"{subjects.QUEUE_DEPTH_PREFIX}.*")
    headers = {"authorization": f"Bearer {gateways.key}", "x-request-timeout-ms": "20000"}
    body = {"input": "wait in line", "model": "all-MiniLM-L6-v2"}
    try:
        async with httpx.AsyncClient(timeout=60) as http:
            waiting = [
                asyncio.create_task(
                    http.post(f"{gateways.urls[0]}/v1/embeddings", json=body, headers=headers)
                )
                for _ in range(2)
            ]
            async with asyncio.timeout(20):  # the first gateway has announced both waiting
                while _decode_depth((await announcements.next_msg(timeout=20)).data) < 2:
                    pass
            # ... and the second has heard it (it counts the other replica's line in the limit)
            heard = await http.get(f"{gateways.urls[1]}/readyz", params={"peers_queued": 2})
            assert heard.json()["checks"]["peers_queued"], heard.text
            refused = await http.post(f"{gateways.urls[1]}/v1/embeddings", json=body, headers=headers)
            released = s.LeaseReleased(
                lease_id=blocker.lease_id, accelerator_id=accelerator, outcome="completed"
            )
            await stack.store.append(Aggregate.ACCELERATOR, accelerator, [released], ExpectedVersion.ANY)
            served = await asyncio.gather(*waiting)
    finally:
        await announcements.unsubscribe()
        await revise_policy(
            stack.store, urls, c.SchedulerPolicyRevised(revision=len(revisions) + 2, settings={})
        )
    assert refused.status_code == 429, refused.text
    assert refused.json()["error"]["code"] == "QUEUE_FULL"
    assert "retry-after" in refused.headers
    assert [r.status_code for r in served] == [200, 200], [r.text for r in served]


def _decode_depth(data: bytes) -> int:
    return msgspec.json.decode(data, type=QueueDepth).depth
