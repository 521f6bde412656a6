"""`GET /admin/v1/projection`: per projected stream, the checkpoint against the stream's sequences
(the lag), and the stretches the projection never saw (`projection_gaps`), newest first."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from eventstore.store import EventStore
from gateway.admin.client import TOKEN_ENV, URL_ENV
from modelforge.cli import main
from modelforge.devstack.nats_server import NatsServer
from projections import projector
from streams import subjects

from .conftest import TOKEN, admin_api
from .helpers import project_until, publish_raw, record_requests, requests_aged_out_unread


async def status(admin: httpx.AsyncClient) -> dict[str, Any]:
    response = await admin.get("/projection")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def stream(body: dict[str, Any], name: str) -> dict[str, Any]:
    (found,) = (s for s in body["streams"] if s["stream"] == name)
    return found


async def last_sequences(store: EventStore) -> dict[str, int]:
    js = store.client.jetstream()
    return {name: (await js.stream_info(name)).state.last_seq for name in subjects.PROJECTED_STREAMS}


async def test_each_checkpoint_equals_its_streams_last_sequence_once_the_projector_caught_up(
    admin: httpx.AsyncClient, private_nats: NatsServer, private_store: EventStore, fresh_database: str
) -> None:
    created = await admin.post("/clients", json={"name": "status-reader", "scopes": ["rag.embedding@1"]})
    assert created.status_code == 200, created.text
    await record_requests(private_store, ["req-1", "req-2"])
    last = await last_sequences(private_store)
    await project_until(fresh_database, private_nats.url, last)

    body = await status(admin)

    assert [s["stream"] for s in body["streams"]] == list(subjects.PROJECTED_STREAMS)
    for name, seq in last.items():
        shown = stream(body, name)
        assert (shown["checkpoint"], shown["last_seq"], shown["first_seq"]) == (seq, seq, 1)
        assert shown["lag"] == 0
        assert shown["gone_unread"] == 0
        assert shown["projected_at"] is not None
    assert (body["gaps"], body["gaps_total"]) == ([], 0)


async def test_the_lag_counts_the_messages_published_since_the_projector_stopped(
    admin: httpx.AsyncClient, private_nats: NatsServer, private_store: EventStore, fresh_database: str
) -> None:
    applied = await record_requests(private_store, ["req-1"])
    await project_until(fresh_database, private_nats.url, {subjects.REQUESTS_STREAM: applied})
    # No projector runs while three more requests arrive.
    last = await record_requests(private_store, ["req-2", "req-3", "req-4"])

    requests = stream(await status(admin), subjects.REQUESTS_STREAM)

    assert (requests["checkpoint"], requests["last_seq"], requests["lag"]) == (applied, last, 3)


async def test_a_stream_never_projected_shows_checkpoint_zero_and_its_whole_length_as_lag(
    admin: httpx.AsyncClient, private_store: EventStore
) -> None:
    last = await record_requests(private_store, ["req-1", "req-2"])

    requests = stream(await status(admin), subjects.REQUESTS_STREAM)

    assert (requests["checkpoint"], requests["projected_at"], requests["lag"]) == (0, None, last)


async def test_a_read_model_the_projector_has_not_created_yet_shows_nothing_applied(
    private_nats: NatsServer, private_store: EventStore, fresh_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    last = await record_requests(private_store, ["req-1"])
    monkeypatch.setenv("DATABASE_URL", fresh_database)  # not migrated: no tables yet
    async with admin_api(private_nats.url) as admin:
        body = await status(admin)
    assert stream(body, subjects.REQUESTS_STREAM)["lag"] == last
    assert (body["gaps"], body["gaps_total"]) == ([], 0)


async def test_requests_gone_unread_are_shown_then_the_gap_the_projector_records_for_them(
    admin: httpx.AsyncClient, private_nats: NatsServer, private_store: EventStore, fresh_database: str
) -> None:
    store = private_store
    first, lost, last = await requests_aged_out_unread(store, fresh_database, private_nats.url)

    before = stream(await status(admin), subjects.REQUESTS_STREAM)
    assert (before["checkpoint"], before["first_seq"], before["last_seq"]) == (first, lost + 1, last)
    assert (before["lag"], before["gone_unread"]) == (last - first, 5)

    await project_until(fresh_database, private_nats.url, {subjects.REQUESTS_STREAM: last})
    body = await status(admin)

    after = stream(body, subjects.REQUESTS_STREAM)
    assert (after["checkpoint"], after["lag"], after["gone_unread"]) == (last, 0, 0)
    assert body["gaps_total"] == 1
    (gap,) = body["gaps"]
    assert {k: gap[k] for k in ("stream", "first_seq", "last_seq", "count", "reason")} == {
        "stream": subjects.REQUESTS_STREAM,
        "first_seq": first + 1,
        "last_seq": lost,
        "count": 5,
        "reason": "aged out of the stream (its max age) before the projector read them",
    }
    assert gap["detected_at"] is not None


async def test_without_a_read_model_the_projection_status_is_refused_as_other_read_model_reads_are(
    private_nats: NatsServer, private_store: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    async with admin_api(private_nats.url) as admin:
        response = await admin.get("/projection")
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "AUTH_BACKEND_UNAVAILABLE"
    assert "DATABASE_URL" in response.json()["error"]["message"]


async def test_the_projection_status_is_in_the_openapi_document(
    private_nats: NatsServer, private_store: EventStore
) -> None:
    async with admin_api(private_nats.url) as admin:
        spec = (await admin.get(admin.base_url.join("/openapi.json"))).json()
    assert "get" in spec["paths"]["/admin/v1/projection"]


async def test_modelforge_projection_status_prints_it_from_the_gateway(
    admin: httpx.AsyncClient,
    private_store: EventStore,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    last = await record_requests(private_store, ["req-1"])
    monkeypatch.setenv("MODELFORGE_HOME", str(tmp_path))  # no embedded stack to fall back on
    monkeypatch.setenv(URL_ENV, str(admin.base_url.join("/")))
    monkeypatch.setenv(TOKEN_ENV, TOKEN)

    # The CLI's client is synchronous: off this loop, which serves the gateway.
    assert await asyncio.to_thread(main, ["projection", "status"]) == 0
    table = capsys.readouterr().out
    assert await asyncio.to_thread(main, ["projection", "status", "--json"]) == 0
    body = json.loads(capsys.readouterr().out)

    (row,) = (line.split() for line in table.splitlines() if line.startswith(subjects.REQUESTS_STREAM))
    assert row == [subjects.REQUESTS_STREAM, "0", "1", str(last), str(last), "never"]
    assert "gaps: none recorded" in table
    assert stream(body, subjects.REQUESTS_STREAM)["lag"] == last


async def test_a_halted_projector_shows_the_event_it_stopped_at(
    admin: httpx.AsyncClient, private_nats: NatsServer, private_store: EventStore, fresh_database: str
) -> None:
    # A type this projector does not know (a gateway upgraded first): the projector halts there.
    unknown = await publish_raw(
        private_store, "mf.evt.client.x.ClientTeleported", "ClientTeleported", b'{"to":"mars"}'
    )
    with pytest.raises(projector.ProjectionHalted):
        async with asyncio.timeout(30):
            await projector.run(fresh_database, private_nats.url, telemetry=False)

    body = await status(admin)
    (halt,) = body["halted"]
    assert {k: halt[k] for k in ("stream", "seq", "event_type")} == {
        "stream": subjects.EVENTS_STREAM,
        "seq": unknown,
        "event_type": "ClientTeleported",
    }
    assert "unknown event type" in halt["reason"]
    assert halt["halted_at"] is not None
    assert stream(body, subjects.EVENTS_STREAM)["checkpoint"] == unknown - 1


async def test_the_halt_is_cleared_by_the_commit_that_applies_the_event_it_stopped_at(
    admin: httpx.AsyncClient, private_nats: NatsServer, private_store: EventStore, fresh_database: str
) -> None:
    last = await record_requests(private_store, ["req-1", "req-2"])
    # As a projector that could not apply req-2 left it, before it was fixed and started again.
    async with await psycopg.AsyncConnection.connect(fresh_database, autocommit=True) as conn:
        await conn.execute(
            "INSERT INTO mf.projection_halts (stream, seq, event_type, reason) VALUES (%s, %s, %s, %s)",
            (subjects.REQUESTS_STREAM, last, "RequestAccepted", "refused"),
        )
    assert len((await status(admin))["halted"]) == 1

    await project_until(fresh_database, private_nats.url, {subjects.REQUESTS_STREAM: last})

    assert (await status(admin))["halted"] == []
