"""Optional: the last telemetry observation per accelerator from MF_TELEMETRY into `telemetry`.

Telemetry is a last-value feed, not an event: it is not replayed and not part of digests. Only
the fields below are read from each JSON message; anything else in it is ignored.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

import msgspec
import psycopg
from nats.js.api import ConsumerConfig, DeliverPolicy
from psycopg import sql

from eventstore.connection import connect
from streams import subjects

log = logging.getLogger("modelforge.projector.telemetry")


class Observation(msgspec.Struct):
    node_id: str
    accelerator_id: str
    total_bytes: int
    used_bytes: int
    observed_at_unix_ms: int


_decoder = msgspec.json.Decoder(Observation)


async def follow_telemetry(
    database_url: str, nats_urls: str | None, schema: str, stop: asyncio.Event
) -> None:
    nats = await connect(nats_urls, "modelforge-projector-telemetry")
    db = await psycopg.AsyncConnection.connect(database_url, autocommit=True, prepare_threshold=None)
    statement = sql.SQL(
        "INSERT INTO {}.telemetry (node_id, accelerator_id, total_bytes, used_bytes, observed_at)"
        " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (node_id, accelerator_id) DO UPDATE SET"
        " total_bytes = EXCLUDED.total_bytes, used_bytes = EXCLUDED.used_bytes, observed_at = EXCLUDED.observed_at"
        " WHERE telemetry.observed_at IS NULL OR telemetry.observed_at <= EXCLUDED.observed_at"
    ).format(sql.Identifier(schema))
    try:
        sub = await nats.client.jetstream().subscribe(
            f"{subjects.TELEMETRY_PREFIX}.>",
            stream=subjects.TELEMETRY_STREAM,
            ordered_consumer=True,
            config=ConsumerConfig(deliver_policy=DeliverPolicy.LAST_PER_SUBJECT),
            idle_heartbeat=5.0,
        )
        async for msg in sub.messages:
            try:
                seen = _decoder.decode(msg.data)
            except msgspec.DecodeError as exc:
                log.warning("ignoring telemetry on %s: %s", msg.subject, exc)
                continue
            observed = datetime.fromtimestamp(seen.observed_at_unix_ms / 1000, UTC)
            await db.execute(
                statement, (seen.node_id, seen.accelerator_id, seen.total_bytes, seen.used_bytes, observed)
            )
            if stop.is_set():
                break
    finally:
        await db.close()
        await nats.close()
