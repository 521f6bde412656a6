"""Admin reads from the read model wait for the caller's last write; one answered without it
says so (`x-read-model-stale: true`) instead of passing stale rows off as fresh."""

from __future__ import annotations

import asyncio

import httpx

from gateway.admin.reads import STALE_HEADER
from modelforge.devstack.nats_server import NatsServer
from projections import projector


async def test_a_read_the_projector_has_not_caught_up_with_is_marked_stale_and_a_caught_up_one_is_not(
    admin: httpx.AsyncClient, private_nats: NatsServer, fresh_database: str
) -> None:
    created = await admin.post("/clients", json={"name": "stale-reader", "scopes": ["rag.embedding@1"]})
    assert created.status_code == 200, created.text
    # No projector runs: the read model cannot have applied that write.
    behind = await admin.get("/scheduler/placements")
    assert behind.status_code == 200, behind.text
    assert behind.headers.get(STALE_HEADER) == "true"

    stop = asyncio.Event()
    running = asyncio.create_task(projector.run(fresh_database, private_nats.url, stop=stop, telemetry=False))
    try:
        caught_up = await admin.get("/scheduler/placements")
        assert caught_up.status_code == 200, caught_up.text
        assert STALE_HEADER not in caught_up.headers
    finally:
        stop.set()
        async with asyncio.timeout(10):
            await running
