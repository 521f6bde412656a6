"""A deployment's row keeps its replicas and placement: as promoted, then as changed."""

from __future__ import annotations

import psycopg

from projections.batch import Catalog
from projections.facts import Fact
from projections.migrate import migrate
from projections.writer import Writer
from streams.events import serving as s
from tests.support.events import stable_deployment

ENVELOPE = s.ResourceEnvelope(required_bytes=1, peak_bytes=1, per_request_bytes=1, cold_load_ms=1.0)


def fact(seq: int, event: s.DeploymentPromoted | s.DeploymentScalingChanged) -> Fact:
    name = type(event).__name__
    at = "2026-12-03T10:00:00+00:00"
    return Fact("MF_EVENTS", seq, f"mf.evt.deployment.dep-1.{name}", {"Mf-Event-Type": name}, event, at, seq)


async def test_a_deployment_row_keeps_its_replicas_and_placement(fresh_database: str) -> None:
    changed = s.DeploymentScalingChanged(
        deployment_id="dep-1", replicas=s.Replicas(min=2, max=3), placement="spread"
    )
    async with await psycopg.AsyncConnection.connect(fresh_database, autocommit=True) as conn:
        await migrate(conn, "mf")
        writer = Writer(conn, "mf", await Catalog.load(conn, "mf"), notify=False)
        query = (
            "SELECT replicas_min, replicas_max, placement FROM mf.deployments WHERE deployment_id = 'dep-1'"
        )
        done = await writer.write([fact(1, stable_deployment("dep-1", ENVELOPE))], {})
        assert await (await conn.execute(query)).fetchall() == [(1, 1, "binpack")]
        await writer.write([fact(2, changed)], done)
        assert await (await conn.execute(query)).fetchall() == [(2, 3, "spread")]
