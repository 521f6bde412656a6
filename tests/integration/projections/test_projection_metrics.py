"""The projection's lag, age and halt on the gateway's `/metrics`, read with prometheus_client's parser."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from eventstore.store import EventStore
from gateway.contracts import register_contracts
from modelforge.devstack.nats_server import NatsServer
from projections import projector
from streams import subjects

from .conftest import admin_gateway
from .helpers import migrated, project_until, publish_raw, record_requests

Samples = dict[tuple[str, str], float]  # (sample name, stream) → value


@pytest.fixture
async def gateway_url(
    private_nats: NatsServer, private_store: EventStore, fresh_database: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[str]:
    """An in-process gateway reading `fresh_database` (migrated, nothing projected yet)."""
    await register_contracts(private_store)
    await migrated(fresh_database)
    monkeypatch.setenv("DATABASE_URL", fresh_database)
    async with admin_gateway(private_nats.url) as (gateway, _):
        yield gateway.url


async def scrape(url: str) -> Samples:
    async with httpx.AsyncClient() as http:
        response = await http.get(f"{url}/metrics")
    assert response.status_code == 200
    return {
        (sample.name, sample.labels["stream"]): sample.value
        for family in text_string_to_metric_families(response.text)
        if family.name.startswith("modelforge_projection_")
        for sample in family.samples
    }


async def test_the_lag_counts_the_events_published_since_the_projector_stopped(
    gateway_url: str, private_nats: NatsServer, private_store: EventStore, fresh_database: str
) -> None:
    applied = await record_requests(private_store, ["req-1"])
    await project_until(fresh_database, private_nats.url, {subjects.REQUESTS_STREAM: applied})
    await record_requests(private_store, ["req-2", "req-3", "req-4"])

    samples = await scrape(gateway_url)

    assert samples["modelforge_projection_lag_events", subjects.REQUESTS_STREAM] == 3
    assert samples["modelforge_projection_seconds_since_applied", subjects.REQUESTS_STREAM] >= 0
    assert samples["modelforge_projection_halted", subjects.REQUESTS_STREAM] == 0


async def test_a_caught_up_projection_shows_no_lag(
    gateway_url: str, private_nats: NatsServer, private_store: EventStore, fresh_database: str
) -> None:
    last = await record_requests(private_store, ["req-1", "req-2"])
    await project_until(fresh_database, private_nats.url, {subjects.REQUESTS_STREAM: last})

    samples = await scrape(gateway_url)

    assert samples["modelforge_projection_lag_events", subjects.REQUESTS_STREAM] == 0


async def test_a_stream_never_applied_has_no_age_yet(gateway_url: str, private_store: EventStore) -> None:
    last = await record_requests(private_store, ["req-1"])

    samples = await scrape(gateway_url)

    assert samples["modelforge_projection_lag_events", subjects.REQUESTS_STREAM] == last
    assert ("modelforge_projection_seconds_since_applied", subjects.REQUESTS_STREAM) not in samples


async def test_a_halted_projector_shows_as_halted_with_the_events_behind_it(
    gateway_url: str, private_nats: NatsServer, private_store: EventStore, fresh_database: str
) -> None:
    await publish_raw(private_store, "mf.evt.client.x.ClientTeleported", "ClientTeleported", b'{"to":"mars"}')
    with pytest.raises(projector.ProjectionHalted):
        async with asyncio.timeout(30):
            await projector.run(fresh_database, private_nats.url, telemetry=False)

    samples = await scrape(gateway_url)

    assert samples["modelforge_projection_halted", subjects.EVENTS_STREAM] == 1
    assert samples["modelforge_projection_lag_events", subjects.EVENTS_STREAM] >= 1


async def test_without_a_read_model_the_metrics_leave_the_projection_out(
    private_nats: NatsServer, private_store: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    async with admin_gateway(private_nats.url) as (gateway, _):
        assert await scrape(gateway.url) == {}
