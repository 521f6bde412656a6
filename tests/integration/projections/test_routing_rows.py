"""Canary rows: a split lands on its stable deployment's row and, with why it was made (a tripped
guard's measurement included), in `routing_changes`, which the admin read returns newest first for
one capability; an experiment's rollback policy lands on its row."""

from __future__ import annotations

import msgspec
import psycopg

from gateway.admin.releases import ROUTING_CHANGES_SQL
from projections.batch import Catalog
from projections.facts import Fact
from projections.migrate import migrate
from projections.writer import Writer
from streams.events import Event
from streams.events import releases as r
from streams.events import serving as s
from tests.support.events import stable_deployment

ENVELOPE = s.ResourceEnvelope(required_bytes=1, peak_bytes=1, per_request_bytes=1, cold_load_ms=1.0)
CAPABILITY = "rag.embedding@1"
GUARD = r.RollbackGuard(kind="invalid_output_count", threshold=3, window_s=600)
POLICY = r.RollbackPolicy(guards=(GUARD,), on_trip="unload")
TRIP = r.GuardTrip(
    experiment_id="exp-1", guard=GUARD, observed=4, baseline=0, experiment_requests=4, stable_requests=7
)


def as_json(value: object) -> object:
    """What a jsonb column gives back for `value`."""
    return msgspec.json.decode(msgspec.json.encode(value))


def fact(seq: int, aggregate_id: str, event: Event) -> Fact:
    name = type(event).__name__
    at = f"2026-12-04T02:00:0{seq}+00:00"
    return Fact(
        "MF_EVENTS", seq, f"mf.evt.deployment.{aggregate_id}.{name}", {"Mf-Event-Type": name}, event, at, seq
    )


async def test_splits_and_rollback_policies_are_projected_for_admin_reads(fresh_database: str) -> None:
    experiment = s.ExperimentCreated(
        deployment_id="exp-1", capability=CAPABILITY, candidate_id="c2", artifact_set_id="x",
        model_name="trial", route="trial", envelope=ENVELOPE,
    )  # fmt: skip
    canary = s.RoutingWeightsChanged(
        deployment_id="dep-1", capability=CAPABILITY, weights={"dep-1": 90, "exp-1": 10}, sticky=True
    )
    rolled_back = msgspec.structs.replace(
        canary, weights={"dep-1": 100, "exp-1": 0}, reason="rollback guard tripped", guard=TRIP
    )
    facts = [
        fact(1, "dep-1", stable_deployment("dep-1", ENVELOPE)),
        fact(2, "exp-1", experiment),
        fact(3, "exp-1", s.RollbackPolicyChanged(deployment_id="exp-1", policy=POLICY)),
        fact(4, "dep-1", canary),
        fact(5, "dep-1", rolled_back),
    ]
    async with await psycopg.AsyncConnection.connect(fresh_database, autocommit=True) as conn:
        await migrate(conn, "mf")
        writer = Writer(conn, "mf", await Catalog.load(conn, "mf"), notify=False)
        await writer.write(facts, {})
        rows = await conn.execute(
            "SELECT deployment_id, routing_weights, routing_sticky, rollback_policy FROM mf.deployments ORDER BY 1"
        )
        assert await rows.fetchall() == [
            ("dep-1", {"dep-1": 100, "exp-1": 0}, True, None),
            ("exp-1", None, False, as_json(POLICY)),
        ]
        await conn.execute("SET search_path TO mf")
        changes = await (await conn.execute(ROUTING_CHANGES_SQL, (CAPABILITY, CAPABILITY, 10))).fetchall()
        assert [(seq, weights, reason, guard) for seq, _, _, weights, _, reason, guard, _ in changes] == [
            (5, {"dep-1": 100, "exp-1": 0}, "rollback guard tripped", as_json(TRIP)),
            (4, {"dep-1": 90, "exp-1": 10}, "", None),
        ]
        other = await (
            await conn.execute(ROUTING_CHANGES_SQL, ("rag.reranking@1", "rag.reranking@1", 10))
        ).fetchall()
        assert other == []
