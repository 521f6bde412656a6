"""Declaring a node lost: when its worker counts as gone, and what its books become."""

from __future__ import annotations

import msgspec

from gateway.scheduler import AcceleratorState, Lease, Resident
from gateway.serving.node_loss import NODE_LOSS_FLOOR_S, next_node_loss_due, nodes_lost, reconcile_lost
from gateway.state.catalog import Catalog, NodeInfo, evolve_catalog
from gateway.state.feed import TelemetryFeed
from streams.events import control as c
from streams.events.identity import NodeCredentialsIssued, NodeCredentialsRevoked
from streams.messages import AcceleratorTelemetry

NOW = 1_700_000_000.0
UP = TelemetryFeed()  # this gateway's telemetry feed, never interrupted
SPEC = c.AcceleratorSpec(accelerator_id="n1-cpu0", kind="cpu", name="cpu", total_bytes=1 << 30)
NODE = NodeInfo(node_id="n1", accelerators=(SPEC,), generation=3)
CATALOG = Catalog(nodes={"n1": NODE})
HOLDING = {
    "n1-cpu0": AcceleratorState(
        accelerator_id="n1-cpu0",
        node_id="n1",
        total_bytes=1 << 30,
        residents=(Resident(deployment_id="emb", measured_bytes=100),),
        leases=(Lease(lease_id="l1", deployment_id="emb", reserved_bytes=5),),
    )
}
IDLE = {"n1-cpu0": AcceleratorState(accelerator_id="n1-cpu0", node_id="n1", total_bytes=1 << 30)}


def sample(
    age_s: float, healthy: bool = True, generation: int = 3, interval_s: float = 5.0
) -> AcceleratorTelemetry:
    return AcceleratorTelemetry(
        node_id="n1",
        accelerator_id="n1-cpu0",
        generation=generation,
        total_bytes=1 << 30,
        used_bytes=0,
        process_bytes=0,
        observed_at_unix_ms=int((NOW - age_s) * 1000),
        residencies=["emb"],
        healthy=healthy,
        interval_s=interval_s,
    )


def test_a_node_silent_for_two_of_its_intervals_while_holding_work_is_lost() -> None:
    assert nodes_lost(CATALOG, HOLDING, [sample(age_s=9.0)], NOW, UP) == []
    lost = nodes_lost(CATALOG, HOLDING, [sample(age_s=10.0)], NOW, UP)
    assert [(n.node_id, n.generation) for n in lost] == [("n1", 3)]


def test_a_short_interval_is_never_judged_sooner_than_the_floor() -> None:
    assert nodes_lost(CATALOG, HOLDING, [sample(age_s=NODE_LOSS_FLOOR_S - 1, interval_s=0.5)], NOW, UP) == []


def test_a_node_that_said_it_stopped_is_lost_at_once() -> None:
    assert [n.reason for n in nodes_lost(CATALOG, HOLDING, [sample(age_s=0.0, healthy=False)], NOW, UP)] == [
        "its agent stopped"
    ]


def test_a_node_whose_credentials_are_revoked_is_unschedulable_and_lost_at_once() -> None:
    revoked = evolve_catalog(CATALOG, NodeCredentialsRevoked(node_id="n1", public_key="U", reason="stolen"))
    assert not revoked.nodes["n1"].schedulable
    assert [n.reason for n in nodes_lost(revoked, HOLDING, [sample(age_s=0.0)], NOW, UP)] == [
        "its credentials were revoked"
    ]
    assert next_node_loss_due(revoked, HOLDING, [sample(age_s=0.0)], UP) == 0.0
    reissued = evolve_catalog(revoked, NodeCredentialsIssued(node_id="n1", public_key="U"))
    assert reissued.nodes["n1"].schedulable


def test_a_node_holding_nothing_or_silent_in_an_older_generation_only_is_not_declared() -> None:
    assert nodes_lost(CATALOG, IDLE, [sample(age_s=60.0)], NOW, UP) == []
    assert nodes_lost(CATALOG, HOLDING, [sample(age_s=60.0, generation=2)], NOW, UP) == []


def test_the_next_loss_is_due_two_intervals_after_the_last_sample() -> None:
    assert next_node_loss_due(CATALOG, HOLDING, [sample(age_s=1.0)], UP) == NOW - 1.0 + 10.0
    assert next_node_loss_due(CATALOG, IDLE, [sample(age_s=1.0)], UP) is None


def test_a_lost_nodes_accelerators_are_reconciled_to_cold_and_its_next_worker_brings_it_back() -> None:
    lost = evolve_catalog(CATALOG, c.NodeLost(node_id="n1", generation=3, last_seen_at=None, reason="r"))
    assert not lost.nodes["n1"].schedulable
    (reconciled,) = reconcile_lost(lost, HOLDING)
    assert (reconciled.accelerator_id, reconciled.held, reconciled.dropped) == ("n1-cpu0", (), ("emb",))
    assert reconcile_lost(lost, IDLE) == []
    back = evolve_catalog(lost, c.WorkerStarted(node_id="n1", generation=4))
    assert back.nodes["n1"].schedulable


def test_a_loss_declared_for_an_older_generation_changes_nothing() -> None:
    stale = evolve_catalog(CATALOG, c.NodeLost(node_id="n1", generation=2, last_seen_at=None, reason="r"))
    assert stale.nodes["n1"] == msgspec.structs.replace(NODE, lost=False)


def test_a_node_silent_only_while_the_telemetry_feed_is_down_is_not_lost() -> None:
    # MF_TELEMETRY electing a leader for a minute: every node silent, none of them gone.
    down = TelemetryFeed(down_since=NOW - 59.0)
    assert nodes_lost(CATALOG, HOLDING, [sample(age_s=60.0)], NOW, down) == []
    assert next_node_loss_due(CATALOG, HOLDING, [sample(age_s=60.0)], down) is None


def test_a_node_gets_its_whole_bound_after_the_feed_comes_back() -> None:
    back = TelemetryFeed(up_since=NOW - 9.0)
    assert nodes_lost(CATALOG, HOLDING, [sample(age_s=60.0)], NOW, back) == []
    assert next_node_loss_due(CATALOG, HOLDING, [sample(age_s=60.0)], back) == NOW + 1.0
    assert [n.node_id for n in nodes_lost(CATALOG, HOLDING, [sample(age_s=60.0)], NOW + 1.0, back)] == ["n1"]


def test_a_node_that_said_it_stopped_is_lost_at_once_even_while_the_feed_is_down() -> None:
    down = TelemetryFeed(down_since=NOW - 1.0)
    assert [
        n.node_id for n in nodes_lost(CATALOG, HOLDING, [sample(age_s=0.0, healthy=False)], NOW, down)
    ] == ["n1"]
