"""The CLI's fetch bar follows a set's ArtifactSetFetchProgressed events from where the verb began
to the end of the fetch, and ignores fetches recorded before."""

from __future__ import annotations

import asyncio

import pytest

from eventstore.connection import Connection
from eventstore.store import EventStore, ExpectedVersion
from gateway.admin.fetch_bar import show_fetch
from streams import subjects
from streams.envelope import new_id
from streams.events.control import ArtifactSetFetchProgressed
from streams.subjects import Aggregate

WAIT_S = 30.0  # a bound on a hung test, not a timing assertion


async def record_fetch(store: EventStore, set_id: str, node_id: str, steps: list[int], total: int) -> None:
    job_id = new_id()
    for fetched in steps:
        event = ArtifactSetFetchProgressed(
            artifact_set_id=set_id, node_id=node_id, job_id=job_id, fetched_bytes=fetched, total_bytes=total
        )
        await store.append(Aggregate.ARTIFACT_SET, set_id, [event], ExpectedVersion.ANY)


async def test_the_bar_follows_the_fetch_that_began_after_it_to_its_end(
    connection: Connection, store: EventStore, capsys: pytest.CaptureFixture[str]
) -> None:
    set_id = f"as-bar-{new_id()[:8]}"
    await record_fetch(store, set_id, "node-before", [0, 2048], 2048)  # an earlier verb's fetch
    after = (await connection.client.jetstream().stream_info(subjects.EVENTS_STREAM)).state.last_seq
    shown = asyncio.get_running_loop().create_task(show_fetch(connection.client, set_id, after + 1))
    await record_fetch(store, set_id, "node-now", [0, 512, 1024], 1024)
    async with asyncio.timeout(WAIT_S):
        await shown
    bar = capsys.readouterr().err
    assert f"node-now fetching {set_id}" in bar
    assert "100%" in bar
    assert "node-before" not in bar
