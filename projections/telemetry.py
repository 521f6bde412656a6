"""Optional: the last telemetry observation per accelerator from MF_TELEMETRY into `telemetry`,
and what each resident deployment's worker holds into `worker_memory`.

Telemetry is a last-value feed, not an event: it is not replayed and not part of digests. Only
the fields below are read from each JSON message; anything else in it is ignored.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import Any

import msgspec
import psycopg
from nats.js.api import ConsumerConfig, DeliverPolicy
from psycopg import sql

from eventstore.connection import connect
from projections.reconnect import lost, reconnect
from streams import subjects

log = logging.getLogger("modelforge.projector.telemetry")
Conn = psycopg.AsyncConnection[Any]


class WorkerFigure(msgspec.Struct):
    deployment_id: str
    bytes: int


class Observation(msgspec.Struct):
    node_id: str
    accelerator_id: str
    total_bytes: int
    used_bytes: int
    observed_at_unix_ms: int
    workers: list[WorkerFigure] = []


# One statement, so that a sample lands whole: the accelerator's row, then its workers' rows,
# replacing those of an older sample (a deployment it no longer names was unloaded). A sample
# older than what is stored changes nothing.
_WRITE = """
WITH newest AS (  -- the statement's snapshot: what was stored before this sample
  SELECT NOT EXISTS (
    SELECT 1 FROM {telemetry} WHERE node_id = %(node)s AND accelerator_id = %(accelerator)s
      AND observed_at > %(at)s
  ) AS yes
), accelerator AS (
  INSERT INTO {telemetry} (node_id, accelerator_id, total_bytes, used_bytes, observed_at)
  VALUES (%(node)s, %(accelerator)s, %(total)s, %(used)s, %(at)s)
  ON CONFLICT (node_id, accelerator_id) DO UPDATE SET
    total_bytes = EXCLUDED.total_bytes, used_bytes = EXCLUDED.used_bytes, observed_at = EXCLUDED.observed_at
  WHERE telemetry.observed_at IS NULL OR telemetry.observed_at <= EXCLUDED.observed_at
), gone AS (
  DELETE FROM {workers} WHERE (SELECT yes FROM newest) AND accelerator_id = %(accelerator)s
    AND NOT (deployment_id = ANY(%(deployments)s::text[]))
)
INSERT INTO {workers} (accelerator_id, deployment_id, node_id, worker_bytes, observed_at)
SELECT %(accelerator)s, w.deployment_id, %(node)s, w.worker_bytes, %(at)s
FROM unnest(%(deployments)s::text[], %(bytes)s::bigint[]) AS w(deployment_id, worker_bytes)
WHERE (SELECT yes FROM newest)
ON CONFLICT (accelerator_id, deployment_id) DO UPDATE SET
  node_id = EXCLUDED.node_id, worker_bytes = EXCLUDED.worker_bytes, observed_at = EXCLUDED.observed_at
"""


_decoder = msgspec.json.Decoder(Observation)


async def follow_telemetry(
    database_url: str, nats_urls: str | None, schema: str, stop: asyncio.Event
) -> None:
    """Follow MF_TELEMETRY into `schema.telemetry` until `stop`; a lost database session is
    connected again (see projections.reconnect) and the observation in hand written on the new one."""
    nats = await connect(nats_urls, "modelforge-projector-telemetry")
    db = await _connect(database_url)
    statement = write_statement(schema)
    try:
        sub = await nats.client.jetstream().subscribe(
            f"{subjects.TELEMETRY_PREFIX}.>",
            stream=subjects.TELEMETRY_STREAM,
            ordered_consumer=True,
            config=ConsumerConfig(deliver_policy=DeliverPolicy.LAST_PER_SUBJECT),
            idle_heartbeat=5.0,
        )
        try:
            async for msg in sub.messages:
                try:
                    seen = _decoder.decode(msg.data)
                except msgspec.DecodeError as exc:
                    log.warning("ignoring telemetry on %s: %s", msg.subject, exc)
                    continue
                row = sample_row(seen)
                written_on = await _write(db, database_url, statement, row, stop)
                if written_on is None:  # stopped while reconnecting: the lost session is closed
                    break
                db = written_on
                if stop.is_set():
                    break
        finally:
            # Ends nats-py's heartbeat task too: closing the connection alone leaves it sleeping
            # up to two heartbeats (10 s) before it notices.
            await sub.unsubscribe()
    finally:
        await db.close()
        await nats.close()


def write_statement(schema: str) -> sql.Composed:
    """The statement writing one sample into `schema` (its parameters: `sample_row`)."""
    return sql.SQL(_WRITE).format(
        telemetry=sql.Identifier(schema, "telemetry"), workers=sql.Identifier(schema, "worker_memory")
    )


def sample_row(seen: Observation) -> dict[str, object]:
    return {
        "node": seen.node_id,
        "accelerator": seen.accelerator_id,
        "total": seen.total_bytes,
        "used": seen.used_bytes,
        "at": datetime.fromtimestamp(seen.observed_at_unix_ms / 1000, UTC),
        "deployments": [w.deployment_id for w in seen.workers],
        "bytes": [w.bytes for w in seen.workers],
    }


async def _connect(database_url: str) -> Conn:
    return await psycopg.AsyncConnection.connect(database_url, autocommit=True, prepare_threshold=None)


async def _write(
    db: Conn, database_url: str, statement: sql.Composed, row: dict[str, object], stop: asyncio.Event
) -> Conn | None:
    """Write `row`, on a new session while the current one is lost; the session it was written
    on, or None when `stop` was set first."""
    while True:
        try:
            await db.execute(statement, row)
            return db
        except psycopg.Error as exc:
            if not lost(exc):
                raise
            log.warning("telemetry follower lost its database session (%s)", exc)
            await db.close()
            again = await reconnect(lambda: _connect(database_url), "telemetry follower", stop)
            if again is None:
                return None
            db = again
