"""A progress bar, in the CLI, of a node fetching an artifact set while a verb waits on a job that
may fetch it (`artifacts import`, `artifacts verify`). It follows the set's
ArtifactSetFetchProgressed events on MF_EVENTS from the moment the verb starts, on a thread of its
own, through NATS_URL (the embedded stack's, or a gateway container's); without NATS_URL it shows
nothing, and a bar that cannot follow never fails the verb."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from typing import Never

from nats.aio.client import Client
from tqdm import tqdm

from eventstore.connection import connect
from eventstore.subscription import subscribe
from streams import subjects
from streams.events.control import ArtifactSetFetchProgressed

NATS_URL_ENV = "NATS_URL"
STOP_S = 5.0  # how long the verb waits for the bar to close once its call returned
CONNECT_S = 5.0


@contextlib.contextmanager
def fetch_bar(artifact_set_id: str) -> Iterator[None]:
    url = os.environ.get(NATS_URL_ENV)
    if not url:
        yield
        return
    follower = _Follower(url, artifact_set_id)
    thread = threading.Thread(target=follower.run, name="fetch-bar", daemon=True)
    thread.start()
    try:
        yield
    finally:
        follower.stop()
        thread.join(STOP_S)


class _Follower:
    def __init__(self, url: str, artifact_set_id: str) -> None:
        self.url, self.artifact_set_id = url, artifact_set_id
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stopped: asyncio.Event | None = None
        self.stop_asked = threading.Event()

    def run(self) -> None:
        with contextlib.suppress(Exception):  # no bar rather than a failed verb
            asyncio.run(self._follow())

    def stop(self) -> None:
        self.stop_asked.set()
        loop, stopped = self.loop, self.stopped
        if loop is not None and stopped is not None:
            with contextlib.suppress(RuntimeError):  # its loop already closed
                loop.call_soon_threadsafe(stopped.set)

    async def _follow(self) -> None:
        self.loop, self.stopped = asyncio.get_running_loop(), asyncio.Event()
        if self.stop_asked.is_set():  # stopped before this loop could hear of it
            return
        connection = await connect(self.url, "cli-fetch-bar", first_connect_s=CONNECT_S)
        try:
            info = await connection.client.jetstream().stream_info(subjects.EVENTS_STREAM)
            following = show_fetch(connection.client, self.artifact_set_id, info.state.last_seq + 1)
            shown = asyncio.get_running_loop().create_task(following)
            await self.stopped.wait()
            shown.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await shown
        finally:
            await connection.close()


async def show_fetch(client: Client, artifact_set_id: str, from_sequence: int) -> None:
    """A bar of the first fetch of the set whose progress is recorded from `from_sequence` on,
    until it is whole."""
    progressed = ArtifactSetFetchProgressed.__name__
    scope = subjects.event_subject(subjects.Aggregate.ARTIFACT_SET, artifact_set_id, progressed)
    bar: tqdm[Never] | None = None
    try:
        async for record in subscribe(client, from_sequence, filter_subject=scope):
            event = record.event
            if not isinstance(event, ArtifactSetFetchProgressed):
                continue
            if bar is None:
                description = f"{event.node_id} fetching {artifact_set_id}"
                bar = tqdm(
                    total=event.total_bytes, unit="B", unit_scale=True, desc=description, file=sys.stderr
                )
            bar.update(event.fetched_bytes - bar.n)
            if event.fetched_bytes >= event.total_bytes:
                return
    finally:
        if bar is not None:
            bar.close()
