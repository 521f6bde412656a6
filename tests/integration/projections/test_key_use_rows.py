"""A key's use (`ClientKeyUsed`) reaches the read model as the client's and the credential's
`last_used_at`, and the admin API's client list shows both, with the client's integration
environment and purpose."""

from __future__ import annotations

import httpx

from eventstore.store import EventStore
from modelforge.devstack.nats_server import NatsServer
from streams import subjects
from streams.events import requests as r

from .helpers import project_until


async def test_the_client_list_shows_when_the_client_and_its_key_were_last_used(
    admin: httpx.AsyncClient, private_nats: NatsServer, private_store: EventStore, fresh_database: str
) -> None:
    created = (
        await admin.post(
            "/clients",
            json={
                "name": "handbook",
                "scopes": ["rag.embedding@1"],
                "integration_environment": "staging",
                "purpose": "handbook search",
            },
        )
    ).json()
    used = r.ClientKeyUsed(
        client_id=created["client_id"], credential_id=created["credential_id"], capability="rag.embedding@1"
    )
    last = await private_store.record_request("rag.embedding@1", "first-use", used)
    await project_until(fresh_database, private_nats.url, {subjects.REQUESTS_STREAM: last})

    (listed,) = (await admin.get("/clients")).json()

    assert (listed["integration_environment"], listed["purpose"]) == ("staging", "handbook search")
    assert listed["last_used_at"] is not None
    assert listed["credentials"][0]["last_used_at"] == listed["last_used_at"]


async def test_a_client_whose_key_was_never_used_shows_no_last_use(admin: httpx.AsyncClient) -> None:
    await admin.post("/clients", json={"name": "idle", "scopes": ["rag.embedding@1"]})

    (listed,) = (await admin.get("/clients")).json()

    assert listed["last_used_at"] is None
    assert listed["credentials"][0]["last_used_at"] is None
