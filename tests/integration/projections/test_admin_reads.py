"""Admin reads from the read model wait for the caller's last write; one answered without it
says so (`x-read-model-stale: true`) instead of passing stale rows off as fresh."""

from __future__ import annotations

import asyncio

import httpx
import psycopg
import pytest

from eventstore.store import EventStore
from gateway.admin.reads import STALE_HEADER, STALE_REASON_HEADER
from gateway.contracts import register_contracts
from modelforge.devstack.nats_server import NatsServer
from modelforge.devstack.postgres import PostgresServer
from projections import projector
from streams.subjects import EVENTS_STREAM
from tests.support.serving import InProcessGateway

from .conftest import admin_api, admin_gateway
from .helpers import halted_by_an_unknown_event, migrated


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


async def test_the_request_history_shows_this_gateways_last_request_under_a_long_commit_interval(
    private_nats: NatsServer, private_store: EventStore, fresh_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # At a trickle the projector commits as seldom as every 10 s (projections.pace); the history
    # read asks for the gateway's last MF_REQUESTS sequence, so it is answered at once with it.
    await register_contracts(private_store)
    await migrated(fresh_database)
    monkeypatch.setenv("DATABASE_URL", fresh_database)
    stop = asyncio.Event()
    running = asyncio.create_task(
        projector.run(fresh_database, private_nats.url, stop=stop, telemetry=False, commit_interval=3600)
    )
    try:
        async with admin_gateway(private_nats.url) as (gateway, admin):
            created = await admin.post("/clients", json={"name": "historian", "scopes": ["rag.embedding@1"]})
            assert created.status_code == 200, created.text
            key = created.json()["key"]
            async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as http:
                refused = await http.post(  # no deployment serves it: refused, and recorded so
                    "/v1/embeddings", json={"input": "x"}, headers={"authorization": f"Bearer {key}"}
                )
            assert refused.status_code == 503, refused.text
            await gateway.settled()  # its RequestRejected acknowledged
            async with asyncio.timeout(30):  # (far less than the commit interval)
                history = await admin.get("/requests")
            assert history.status_code == 200, history.text
            assert STALE_HEADER not in history.headers
            assert refused.headers["x-request-id"] in {row["request_id"] for row in history.json()}
    finally:
        stop.set()
        async with asyncio.timeout(10):
            await running


async def test_a_read_while_the_projection_is_halted_is_marked_stale_naming_where_it_halted(
    private_nats: NatsServer, private_store: EventStore, fresh_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await register_contracts(private_store)  # as provision does: the gateway's start writes nothing
    await migrated(fresh_database)
    monkeypatch.setenv("DATABASE_URL", fresh_database)
    async with admin_gateway(private_nats.url) as (gateway, admin):
        await _halted_read_is_marked(admin, gateway, private_nats, private_store, fresh_database)


async def _halted_read_is_marked(
    admin: httpx.AsyncClient,
    gateway: InProcessGateway,
    private_nats: NatsServer,
    private_store: EventStore,
    fresh_database: str,
) -> None:
    # The gateway listens from here on. Nothing has projected the log yet (the contracts): the read
    # waits for it, then says the read model is behind.
    behind = await admin.get("/scheduler/placements")
    assert behind.headers.get(STALE_HEADER) == "true"
    assert behind.headers[STALE_REASON_HEADER].startswith("projection behind")
    unknown = await halted_by_an_unknown_event(gateway, private_store, fresh_database, private_nats.url)

    halted = await admin.get("/scheduler/placements")

    assert halted.status_code == 200, halted.text
    assert halted.headers.get(STALE_HEADER) == "true"
    assert f"halted at {EVENTS_STREAM} sequence {unknown}" in halted.headers[STALE_REASON_HEADER]


async def test_a_stopped_gateway_leaves_no_session_on_its_read_models_database(
    private_nats: NatsServer, private_store: EventStore, fresh_database: str, postgres_server: PostgresServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    await migrated(fresh_database)
    monkeypatch.setenv("DATABASE_URL", fresh_database)
    async with admin_api(private_nats.url) as client:  # the gateway stops as the block ends
        read = await client.get("/scheduler/placements")
        assert read.status_code == 200, read.text  # read from the read model, waiting on it first
    # DROP DATABASE without FORCE is refused while any session is connected to it.
    async with await psycopg.AsyncConnection.connect(postgres_server.admin_url, autocommit=True) as admin:
        await admin.execute(f'DROP DATABASE "{fresh_database.rsplit("/", 1)[1]}"')
