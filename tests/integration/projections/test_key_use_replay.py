"""`replay --verify` after MF_REQUESTS aged out: a key whose last use (`ClientKeyUsed`) aged out has
its `last_used_at` only in the live schema, so it is left out of the comparison; a key used since is
compared, and equal."""

from __future__ import annotations

import asyncio

from eventstore.store import EventStore
from modelforge.devstack.nats_server import NatsServer
from projections.replay import replay
from streams import configs, subjects
from streams.events import requests as r

from .helpers import aged_out, project_until


async def _used(store: EventStore, *clients: str) -> int:
    last = 0
    for client in clients:
        used = r.ClientKeyUsed(client_id=client, credential_id=f"cred-{client}", capability="rag.embedding@1")
        last = await store.record_request("rag.embedding@1", f"use-{client}", used)
    return last


async def test_a_key_last_used_before_the_messages_left_is_not_compared_and_one_used_since_is(
    private_nats: NatsServer, private_store: EventStore, fresh_database: str
) -> None:
    first = await _used(private_store, "cl-old", "cl-both")
    await project_until(fresh_database, private_nats.url, {subjects.REQUESTS_STREAM: first})
    lost = await aged_out(
        private_store,
        configs.requests_stream(),
        subjects.REQUESTS_STREAM,
        asyncio.ensure_future(_used(private_store, "cl-lost")),
    )
    last = await _used(private_store, "cl-both")
    await project_until(fresh_database, private_nats.url, {subjects.REQUESTS_STREAM: last})

    verified = await replay(fresh_database, private_nats.url, verify=True, progress=False)

    assert verified.requests_from == lost + 1
    assert verified.differences == []
