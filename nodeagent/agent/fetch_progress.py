"""A job's artifact fetch as events: at the start, at each quarter of its bytes, and once whole,
on the artifact set's aggregate (quiet, unlike the accelerator's), so whoever waits on the job sees
it advance without the log getting one event per file or chunk."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from streams.events.control import ArtifactSetFetchProgressed

QUARTERS = 4


class FetchProgress:
    def __init__(
        self,
        artifact_set_id: str,
        node_id: str,
        job_id: str,
        record: Callable[[ArtifactSetFetchProgressed], Awaitable[None]],
    ) -> None:
        self.artifact_set_id, self.node_id, self.job_id = artifact_set_id, node_id, job_id
        self.record = record
        self.reported = -1  # the last quarter reported

    async def __call__(self, fetched: int, total: int) -> None:
        quarter = QUARTERS if fetched >= total else fetched * QUARTERS // max(total, 1)
        if quarter <= self.reported:
            return
        self.reported = quarter
        event = ArtifactSetFetchProgressed(
            artifact_set_id=self.artifact_set_id,
            node_id=self.node_id,
            job_id=self.job_id,
            fetched_bytes=fetched,
            total_bytes=total,
        )
        await self.record(event)
