"""A gateway's sessions on the PostgreSQL read model (the tables of projections/migrations), with
read-your-writes: a read first waits until the projector has applied the caller's last append
(at most 5 s), or learns why it would not (the projection halted, or is behind). The admin API's
reads use them (gateway/admin/reads.py); the HTTP edge holds them, and the replica closes them.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

import psycopg
from psycopg.rows import dict_row

from projections.migrate import LIVE_SCHEMA
from projections.wait import ProjectionWaiter
from streams import subjects
from streams.codes import ServingError

log = logging.getLogger("modelforge.gateway.admin")


class ReadModels:
    """One gateway's read models, one per DATABASE_URL its reads have seen (read per call: a test
    may set it late). Each holds a waiting session until `close`, which the gateway's stop calls:
    a session living past its gateway would outlive the database too (and reconnect to it)."""

    def __init__(self) -> None:
        self._models: dict[str, ReadModel] = {}

    def get(self) -> ReadModel | None:
        url = os.environ.get("DATABASE_URL", "")
        if not url:
            return None
        if url not in self._models:
            self._models[url] = ReadModel(url)
        return self._models[url]

    def required(self, what: str) -> ReadModel:
        """The read model, for a read that has no other source: without DATABASE_URL (a stack without a
        projector) it is refused AUTH_BACKEND_UNAVAILABLE, naming `what` needs it."""
        model = self.get()
        if model is None:
            raise ServingError("AUTH_BACKEND_UNAVAILABLE", f"{what} needs the read model (DATABASE_URL)")
        return model

    async def close(self) -> None:
        models = list(self._models.values())
        self._models.clear()
        for model in models:
            await model.close()


class ReadModel:
    def __init__(self, database_url: str, schema: str = LIVE_SCHEMA) -> None:
        self.url, self.schema = database_url, schema
        self.waiter: ProjectionWaiter | None = None
        self._opening = asyncio.Lock()  # concurrent first reads open one waiter, not one each

    async def _waiter(self) -> ProjectionWaiter:
        async with self._opening:
            if self.waiter is None:
                self.waiter = await ProjectionWaiter.open(self.url, self.schema)
            return self.waiter

    async def close(self) -> None:
        async with self._opening:
            if self.waiter is not None:
                await self.waiter.close()
                self.waiter = None

    async def stale_because(self, events_seq: int, requests_seq: int = 0, timeout: float = 5.0) -> str | None:
        """Why a read now would miss these sequences (logged), or None once the projector applied
        them within `timeout`. A halted projection is not waited for: it will not move on its own."""
        waiter = await self._waiter()
        if waiter.halted:
            stream, seq = min(waiter.halted.items())
            return f"projection halted at {stream} sequence {seq} (see GET /admin/v1/projection)"
        for stream, seq in ((subjects.EVENTS_STREAM, events_seq), (subjects.REQUESTS_STREAM, requests_seq)):
            if seq and not await waiter.wait(seq, stream, timeout):
                applied = waiter.applied.get(stream, 0)
                log.warning(
                    "read model has applied %s only through %d, not %d, after %.0f s: answering from it as it is",
                    stream,
                    applied,
                    seq,
                    timeout,
                )
                return f"projection behind: {stream} applied through {applied}, not {seq}"
        return None

    async def query(self, text: str, params: tuple[object, ...] = ()) -> list[dict[str, Any]]:
        async with await psycopg.AsyncConnection.connect(
            self.url, autocommit=True, row_factory=dict_row
        ) as conn:
            await conn.execute(f'SET search_path TO "{self.schema}"')
            cur = await conn.execute(text.encode(), params)  # fixed statements; values travel as params
            return [dict(row) for row in await cur.fetchall()]
