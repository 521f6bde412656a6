"""Concurrent embedding requests of one deployment share a run once the gateway has enough of its
runs in flight: one lease naming them all, one invoke; each is still answered with its own vectors
and usage, recorded as itself, refused alone at dispatch, and timed out alone when its deadline
passes while its group forms."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable

import httpx
import msgspec
import numpy as np
from nats.aio.subscription import Subscription

from eventstore.store import ExpectedVersion
from gateway.clients.service import ClientService
from streams import subjects
from streams.events import serving as s
from streams.events.requests import RequestCompleted
from streams.messages import QueueDepth
from streams.subjects import Aggregate
from tests.integration.gateway.conftest import (
    PRESSURE_PAST_BUDGET,
    SHARES_THE_STACK,
    Stack,
    books_filled,
    coalescing_after,
    failure_of,
    first_event,
    key_issued,
    policy_while,
)
from tests.support.agents import aggregate_events

pytestmark = SHARES_THE_STACK

# Three requests filling one run of the deployment (its batch: 32 texts) between them.
TEXTS = {
    "b": [f"Sentence {i} about cats on mats." for i in range(10)],
    "c": [f"A longer sentence number {i}, about the markets falling sharply today." for i in range(11)],
    "d": [f"ModelForge serves embedding {i}." for i in range(11)],
}


class Line:
    """The gateway's queue depth as it publishes it."""

    def __init__(self, depths: Subscription) -> None:
        self.depths = depths

    async def reaches(self, depth: int) -> None:
        async with asyncio.timeout(20):
            while (
                msgspec.json.decode((await self.depths.next_msg(timeout=20)).data, type=QueueDepth).depth
                < depth
            ):
                pass


@contextlib.asynccontextmanager
async def one_run_waiting(stack: Stack, http: httpx.AsyncClient) -> AsyncIterator[Line]:
    """While the block runs, requests share runs from one in flight, and a request of one text
    waits for capacity (its run in flight); then capacity frees up and it is served."""
    assert stack.gateway.replica is not None
    ctx = stack.gateway.replica.edge.ctx
    accelerator = f"{stack.node}-cpu0"
    blockers, released = books_filled(stack, accelerator)
    depths = await stack.connection.client.subscribe(subjects.queue_depth_subject(ctx.gateway_id))
    async with coalescing_after(stack, 1), policy_while(stack, PRESSURE_PAST_BUDGET):
        seq = await stack.store.append(Aggregate.ACCELERATOR, accelerator, blockers, ExpectedVersion.ANY)
        try:
            assert await ctx.live.wait_applied(seq, timeout=10)
            first = asyncio.ensure_future(post(stack, http, stack.key.key, "The first one goes alone."))
            line = Line(depths)
            await line.reaches(1)
            yield line
        finally:
            await depths.unsubscribe()
            await stack.store.append(Aggregate.ACCELERATOR, accelerator, released, ExpectedVersion.ANY)
        assert (await first).status_code == 200


def post(
    stack: Stack, http: httpx.AsyncClient, key: str, texts: object, timeout_ms: int = 30_000
) -> Awaitable[httpx.Response]:
    headers = {"authorization": f"Bearer {key}", "x-request-timeout-ms": str(timeout_ms)}
    return http.post(f"{stack.gateway.url}/v1/embeddings", json={"input": texts}, headers=headers)


async def grouped(
    stack: Stack, http: httpx.AsyncClient, keys: dict[str, str], disabled: str = ""
) -> dict[str, httpx.Response]:
    """Requests b, c, d with `keys`, behind a run in flight: they fill the next run, which waits
    in line behind it, while the client `disabled` (if any) is disabled. Their answers."""
    assert stack.gateway.replica is not None
    async with one_run_waiting(stack, http) as line:
        members = {name: asyncio.ensure_future(post(stack, http, keys[name], TEXTS[name])) for name in TEXTS}
        await line.reaches(2)  # full, the group departed and waits in line behind the first
        if disabled:
            # A set-up step here: how fast a withdrawal applies is tested in tests/integration/clients.
            applied = await ClientService(stack.store).disable(disabled, "abuse")
            await stack.gateway.replica.edge.directory.wait_until_applied(applied, timeout=10)
    return {name: await answer for name, answer in members.items()}


async def alone(stack: Stack, http: httpx.AsyncClient, texts: list[str]) -> dict[str, object]:
    async with coalescing_after(stack, 0):
        response = await post(stack, http, stack.key.key, texts)
    assert response.status_code == 200, response.text
    body: dict[str, object] = response.json()
    return body


async def completion_of(stack: Stack, request_id: str) -> RequestCompleted:
    def wanted(event: object) -> bool:
        return isinstance(event, RequestCompleted) and event.request_id == request_id

    completed = await first_event(stack, subjects.REQUESTS_STREAM, wanted)
    assert isinstance(completed, RequestCompleted)
    return completed


def vectors(body: dict[str, object]) -> np.ndarray:
    data = body["data"]
    assert isinstance(data, list)
    assert [item["index"] for item in data] == list(range(len(data)))
    return np.array([item["embedding"] for item in data])


async def test_requests_sharing_a_run_share_one_lease_and_each_gets_what_it_gets_alone(stack: Stack) -> None:
    keys = dict.fromkeys(TEXTS, stack.key.key)
    async with httpx.AsyncClient(timeout=60) as http:
        answers = await grouped(stack, http, keys)
        bodies = {name: answer.json() for name, answer in answers.items()}
        assert all(answer.status_code == 200 for answer in answers.values()), bodies
        for name, texts in TEXTS.items():
            solo = await alone(stack, http, texts)
            np.testing.assert_allclose(vectors(bodies[name]), vectors(solo), atol=1e-5)
            assert bodies[name]["usage"] == solo["usage"]
    ids = {bodies[name]["request_id"] for name in TEXTS}
    await stack.gateway.settled()
    events = await aggregate_events(stack.connection, Aggregate.ACCELERATOR, f"{stack.node}-cpu0")
    shared = [e for e in events if isinstance(e, s.LeaseGranted) and ids & set(e.request_ids)]
    assert len(shared) == 1
    assert set(shared[0].request_ids) == ids
    assert shared[0].request_id == shared[0].request_ids[0]
    for name in TEXTS:
        completed = await completion_of(stack, bodies[name]["request_id"])
        assert completed.usage.input_tokens == bodies[name]["usage"]["prompt_tokens"]
        assert completed.usage.items == len(TEXTS[name])


async def test_a_member_refused_at_dispatch_fails_alone_while_the_others_are_served(stack: Stack) -> None:
    withdrawn = await key_issued(stack, "shared-withdrawn", ["rag.embedding@1"], requests_per_minute=1000)
    keys = {**dict.fromkeys(TEXTS, stack.key.key), "b": withdrawn.key}
    async with httpx.AsyncClient(timeout=60) as http:
        answers = await grouped(stack, http, keys, disabled=withdrawn.client_id)
    assert answers["b"].status_code == 403, answers["b"].text
    refused = answers["b"].json()["error"]
    assert refused["code"] == "CAPABILITY_NOT_AUTHORIZED"
    assert (await failure_of(stack, refused["request_id"])).code == "CAPABILITY_NOT_AUTHORIZED"
    for name in ("c", "d"):
        assert answers[name].status_code == 200, answers[name].text
        assert len(answers[name].json()["data"]) == len(TEXTS[name])


async def test_a_request_whose_deadline_passes_while_its_group_forms_times_out_alone(stack: Stack) -> None:
    async with httpx.AsyncClient(timeout=60) as http, one_run_waiting(stack, http):
        late = await post(stack, http, stack.key.key, "Waits to share the next run.", timeout_ms=300)
    assert late.status_code == 504, late.text
    error = late.json()["error"]
    assert error["code"] == "REQUEST_TIMEOUT"
    assert (await failure_of(stack, error["request_id"])).code == "REQUEST_TIMEOUT"
