"""Requests per minute and concurrency, exact across two gateway replicas sharing JetStream."""

from __future__ import annotations

import asyncio
import json
import random

import pytest
from nats.js.errors import NotFoundError

from gateway.clients.limits import RequestLimiter
from gateway.clients.model import ClientPrincipal
from gateway.clients.permit import Permit
from gateway.clients.rate_blocks import BLOCK_MOST
from streams.codes import ServingError
from streams.subjects import (
    LIMITS_CONCURRENCY_STREAM,
    LIMITS_RATE_STREAM,
    concurrency_slot_subject,
    deployment_slots,
    rate_window_subject,
    slot_subject,
)
from tests.integration.clients.conftest import Gateways


def principal(name: str, rpm: int, concurrency: int) -> ClientPrincipal:
    return ClientPrincipal(
        client_id=name.replace("app-", "cl_"),
        name=name,
        scopes=frozenset({"rag.embedding@1"}),
        requests_per_minute=rpm,
        max_concurrency=concurrency,
        priority=0,
        project_id=None,
        credential_id="cred_test",
    )


async def attempt_all(
    gateways: Gateways, who: ClientPrincipal, attempts: int
) -> tuple[list[Permit], list[ServingError]]:
    limiters = [gateways.a.limiter, gateways.b.limiter]
    outcomes = await asyncio.gather(
        *(limiters[i % 2].acquire(who) for i in range(attempts)), return_exceptions=True
    )
    permits = [o for o in outcomes if isinstance(o, Permit)]
    errors = [o for o in outcomes if isinstance(o, ServingError)]
    assert len(permits) + len(errors) == attempts, outcomes
    return permits, errors


async def release_all(permits: list[Permit]) -> None:
    await asyncio.gather(*(p.release() for p in permits))


async def test_rpm_is_exact_across_two_replicas(gateways: Gateways, unique_name: str) -> None:
    who = principal(unique_name, rpm=10, concurrency=100)
    permits, errors = await attempt_all(gateways, who, 25)
    assert len(permits) == 10
    assert {e.code for e in errors} == {"RATE_LIMITED"}
    assert all(e.http_status == 429 and e.details["retry_after_s"] == 30 for e in errors)
    await release_all(permits)
    # Finishing requests does not give back rate: the minute's budget is spent on both replicas.
    for limiter in (gateways.a.limiter, gateways.b.limiter):
        with pytest.raises(ServingError) as caught:
            await limiter.acquire(who)
        assert caught.value.code == "RATE_LIMITED"


async def test_the_next_minute_admits_again(gateways: Gateways, unique_name: str) -> None:
    who = principal(unique_name, rpm=3, concurrency=100)
    permits, _ = await attempt_all(gateways, who, 6)
    assert len(permits) == 3
    await release_all(permits)
    gateways.minute.now += 60
    permits, errors = await attempt_all(gateways, who, 6)
    assert (len(permits), len(errors)) == (3, 3)
    await release_all(permits)


async def test_requests_refused_for_concurrency_do_not_use_up_the_rate(
    gateways: Gateways, unique_name: str
) -> None:
    who = principal(unique_name, rpm=4, concurrency=1)
    held = await gateways.a.limiter.acquire(who)
    for limiter in (gateways.a.limiter, gateways.b.limiter, gateways.b.limiter):
        with pytest.raises(ServingError) as caught:
            await limiter.acquire(who)
        assert caught.value.code == "QUEUE_FULL"
    await held.release()
    admitted = []
    for limiter in (gateways.b.limiter, gateways.a.limiter, gateways.b.limiter):
        permit = await limiter.acquire(who)  # rpm 4: the three refusals above cost nothing
        admitted.append(permit)
        await permit.release()
    with pytest.raises(ServingError) as caught:
        await gateways.a.limiter.acquire(who)
    assert caught.value.code == "RATE_LIMITED"


async def test_concurrency_is_exact_across_two_replicas(gateways: Gateways, unique_name: str) -> None:
    who = principal(unique_name, rpm=1000, concurrency=3)
    permits, errors = await attempt_all(gateways, who, 10)
    assert len(permits) == 3
    assert {(e.code, e.http_status) for e in errors} == {("QUEUE_FULL", 429)}
    assert len({p.slot for p in permits}) == 3
    # A fourth from either replica is refused until one is released; then exactly one more fits.
    for limiter in (gateways.a.limiter, gateways.b.limiter):
        with pytest.raises(ServingError) as caught:
            await limiter.acquire(who)
        assert caught.value.code == "QUEUE_FULL"
    await permits.pop().release()
    more, errors = await attempt_all(gateways, who, 4)
    assert (len(more), len(errors)) == (1, 3)
    await release_all(permits + more)


async def test_concurrency_never_exceeds_its_limit_under_churn(gateways: Gateways, unique_name: str) -> None:
    who = principal(unique_name, rpm=10_000, concurrency=3)
    holding = 0
    most = 0
    admitted = 0

    async def worker(limiter: RequestLimiter, rounds: int) -> None:
        nonlocal holding, most, admitted
        for _ in range(rounds):
            try:
                permit = await limiter.acquire(who)
            except ServingError as error:
                assert error.code == "QUEUE_FULL"
                continue
            holding += 1
            admitted += 1
            most = max(most, holding)
            await asyncio.sleep(random.random() / 1000)  # hold it across other workers' attempts
            holding -= 1
            await permit.release()

    await asyncio.gather(*(worker([gateways.a.limiter, gateways.b.limiter][i % 2], 20) for i in range(8)))
    assert most <= 3
    assert admitted >= 3


async def test_a_permit_is_released_once_even_if_released_twice(gateways: Gateways, unique_name: str) -> None:
    who = principal(unique_name, rpm=100, concurrency=1)
    async with gateways.a.limiter.admit(who) as permit:
        assert not permit.released
    assert permit.released
    await permit.release()
    second = await gateways.b.limiter.acquire(who)
    await second.release()


async def test_a_held_slot_carries_a_ttl_so_a_crashed_replica_frees_it(
    gateways: Gateways, unique_name: str
) -> None:
    who = principal(unique_name, rpm=100, concurrency=1)
    permit = await gateways.a.limiter.acquire(who)
    js = gateways.b.connection.client.jetstream()
    stored = await js.get_last_msg(
        LIMITS_CONCURRENCY_STREAM, concurrency_slot_subject(who.client_id, permit.slot)
    )
    assert stored.headers is not None
    assert stored.headers["Nats-TTL"] == f"{int(gateways.a.limiter.slot_ttl_s)}s"
    await permit.release()


async def test_renewing_a_held_slot_keeps_it_held_and_release_frees_the_renewed_message(
    gateways: Gateways, unique_name: str
) -> None:
    who = principal(unique_name, rpm=100, concurrency=1)
    permit = await gateways.a.limiter.acquire(who)
    first = permit.sequence
    permit._start_renewal()  # what the half-life timer does
    assert permit._renewing is not None
    await permit._renewing
    assert permit.sequence > first
    assert not permit.lost
    with pytest.raises(ServingError) as caught:
        await gateways.b.limiter.acquire(who)
    assert caught.value.code == "QUEUE_FULL"
    await permit.release()
    again = await gateways.b.limiter.acquire(who)
    await again.release()


async def test_a_replica_checks_a_client_first_until_it_has_seen_it_far_from_its_limits(
    gateways: Gateways, unique_name: str
) -> None:
    who = principal(unique_name, rpm=10, concurrency=4)
    assert not gateways.a.limiter.has_headroom(who)
    await (await gateways.a.limiter.acquire(who)).release()
    assert gateways.a.limiter.has_headroom(who)
    assert not gateways.b.limiter.has_headroom(who)  # facts are per replica


async def test_a_client_past_half_its_rate_is_checked_first(gateways: Gateways, unique_name: str) -> None:
    who = principal(unique_name, rpm=4, concurrency=100)
    for expected in (True, True, False):
        await (await gateways.a.limiter.acquire(who)).release()
        assert gateways.a.limiter.has_headroom(who) is expected


async def test_a_client_holding_half_its_slots_is_checked_first(gateways: Gateways, unique_name: str) -> None:
    who = principal(unique_name, rpm=100, concurrency=4)
    first = await gateways.a.limiter.acquire(who)
    assert gateways.a.limiter.has_headroom(who)
    second = await gateways.a.limiter.acquire(who)
    assert not gateways.a.limiter.has_headroom(who)
    await release_all([first, second])
    assert gateways.a.limiter.has_headroom(who)


async def test_a_refusal_has_a_replica_check_the_client_first_until_a_later_window_shows_room(
    gateways: Gateways, unique_name: str
) -> None:
    who = principal(unique_name, rpm=4, concurrency=100)
    # Kept slots outlive the test's steps: a's kept slot let go mid-way (IDLE_S, 1 s, on a loaded
    # machine) had a try a slot b keeps, and that contention rightly has a check the client first.
    for replica in gateways.both:
        replica.limiter._idle._idle_s = 600.0
    await (await gateways.a.limiter.acquire(who)).release()
    assert gateways.a.limiter.has_headroom(who)
    await release_all([await gateways.b.limiter.acquire(who) for _ in range(3)])
    # a's refused request below gives its slot up, so a's next one tries a random slot: b must keep
    # none it could meet (1 in 100 did, and that contention too has a check the client first).
    await gateways.b.limiter._idle.close()
    assert gateways.a.limiter.has_headroom(who)  # stale: the other replica spent the rest
    with pytest.raises(ServingError):
        await gateways.a.limiter.acquire(who)
    assert not gateways.a.limiter.has_headroom(who)
    gateways.minute.now += 60
    assert not gateways.a.limiter.has_headroom(who)  # last window's total was past half
    await (await gateways.a.limiter.acquire(who)).release()
    assert gateways.a.limiter.has_headroom(who)


async def window_total(gateways: Gateways, who: ClientPrincipal) -> int:
    """The shared counter of the client's current rate window, as the stream holds it."""
    js = gateways.a.connection.client.jetstream()
    window = int(gateways.minute.now // 60)
    stored = await js.get_last_msg(LIMITS_RATE_STREAM, rate_window_subject(who.client_id, window))
    return int(json.loads(stored.data)["val"])


async def test_a_client_far_from_its_rate_is_counted_a_block_at_a_time(
    gateways: Gateways, unique_name: str
) -> None:
    who = principal(unique_name, rpm=1_000_000, concurrency=100)
    for _ in range(1 + BLOCK_MOST):  # the first counts one unit (no total seen yet), the second a block
        await (await gateways.a.limiter.acquire(who)).release()
    assert await window_total(gateways, who) == 1 + BLOCK_MOST


async def test_rpm_is_exact_across_two_replicas_counting_in_blocks(
    gateways: Gateways, unique_name: str
) -> None:
    rpm = 64 * BLOCK_MOST
    who = principal(unique_name, rpm=rpm, concurrency=100)
    admitted, refusals = 0, set()
    for attempt in range(rpm + 40):
        try:
            permit = await [gateways.a.limiter, gateways.b.limiter][attempt % 2].acquire(who)
        except ServingError as refused:
            refusals.add(refused.code)
            continue
        admitted += 1
        await permit.release()
    assert (admitted, refusals) == (rpm, {"RATE_LIMITED"})
    assert await window_total(gateways, who) == rpm


async def test_a_block_reaching_past_the_rate_admits_only_the_units_within_it(
    gateways: Gateways, unique_name: str
) -> None:
    rpm = 64 * BLOCK_MOST
    who = principal(unique_name, rpm=rpm, concurrency=100)
    await (await gateways.a.limiter.acquire(who)).release()  # replica a has seen the client far from it
    window = int(gateways.minute.now // 60)
    await gateways.b.connection.client.publish(  # replica b (its increment) left four units since
        rate_window_subject(who.client_id, window), b"", headers={"Nats-Incr": f"+{rpm - 5}"}
    )
    await gateways.b.connection.client.flush()
    permits, errors = [], []
    for _ in range(6):
        try:
            permits.append(await gateways.a.limiter.acquire(who))
        except ServingError as refused:
            errors.append(refused.code)
    await release_all(permits)
    assert (len(permits), errors) == (4, ["RATE_LIMITED", "RATE_LIMITED"])
    assert await window_total(gateways, who) == rpm  # the block's surplus was given back


async def test_a_unit_a_request_refused_its_slot_took_goes_to_the_next_request(
    gateways: Gateways, unique_name: str
) -> None:
    who = principal(unique_name, rpm=1_000_000, concurrency=1)
    await (await gateways.a.limiter.acquire(who)).release()
    held = await gateways.a.limiter.acquire(who)  # counts a block; uses one unit of it
    with pytest.raises(ServingError) as caught:
        await gateways.a.limiter.acquire(who)
    assert caught.value.code == "QUEUE_FULL"
    await held.release()
    for _ in range(BLOCK_MOST - 1):  # the block's rest, the refused request's unit among it
        await (await gateways.a.limiter.acquire(who)).release()
    assert await window_total(gateways, who) == 1 + BLOCK_MOST


async def slot_held(gateways: Gateways, who: ClientPrincipal, slot: int) -> bool:
    js = gateways.b.connection.client.jetstream()
    try:
        await js.get_last_msg(LIMITS_CONCURRENCY_STREAM, concurrency_slot_subject(who.client_id, slot))
    except NotFoundError:
        return False
    return True


async def test_a_slot_let_go_far_from_the_limit_goes_to_the_next_request_without_a_message(
    gateways: Gateways, unique_name: str
) -> None:
    who = principal(unique_name, rpm=1000, concurrency=100)
    first = await gateways.a.limiter.acquire(who)
    await first.release()
    assert await slot_held(gateways, who, first.slot)  # kept: still taken for every other replica
    second = await gateways.a.limiter.acquire(who)
    assert (second.slot, second.sequence) == (first.slot, first.sequence)
    await second.release()


async def test_a_slot_let_go_near_the_limit_is_freed_at_once(gateways: Gateways, unique_name: str) -> None:
    who = principal(unique_name, rpm=1000, concurrency=2)
    permits = [await gateways.a.limiter.acquire(who) for _ in range(2)]
    await permits[0].release()
    assert not await slot_held(gateways, who, permits[0].slot)
    elsewhere = await gateways.b.limiter.acquire(who)
    await release_all([permits[1], elsewhere])


async def test_a_closing_replica_frees_the_slots_it_kept(gateways: Gateways, unique_name: str) -> None:
    who = principal(unique_name, rpm=1000, concurrency=100)
    permit = await gateways.a.limiter.acquire(who)
    await permit.release()
    await gateways.a.limiter.close()
    assert not await slot_held(gateways, who, permit.slot)


async def test_a_deployments_slot_is_freed_at_once_even_far_from_its_cap(gateways: Gateways) -> None:
    group = deployment_slots("dep-kept", "wait")  # a queue's place: nobody waits on its release
    permit = await gateways.a.limiter.take_slot(group, 100)
    assert permit is not None
    permit.announce = False
    await permit.release()
    js = gateways.b.connection.client.jetstream()
    with pytest.raises(NotFoundError):
        await js.get_last_msg(LIMITS_CONCURRENCY_STREAM, slot_subject(group, permit.slot))
