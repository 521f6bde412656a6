"""The agents' metrics snapshots as the gateway reads them: their families merged across nodes,
each sample labelled by node; a snapshot that does not parse or holds another's family is refused;
each parsed once, by the first scrape that shows it."""

from __future__ import annotations

from typing import Any, cast

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from prometheus_client.parser import text_string_to_metric_families

from gateway.serving import fleet_metrics
from gateway.serving.fleet_metrics import FleetMetrics, merged, parsed
from nodeagent.agent.metrics import AgentMetrics


def snapshot(served: int) -> str:
    metrics = AgentMetrics()
    for _ in range(served):
        metrics.invoked("rag.embedding@1", "OK", 0.01)
    return metrics.snapshot().decode()


def test_an_agents_snapshot_holds_only_its_own_families() -> None:
    names = {family.name for family in text_string_to_metric_families(snapshot(1))}
    assert names
    assert all(name.startswith("modelforge_agent_") for name in names)


def test_each_nodes_samples_are_labelled_with_the_node_in_one_family() -> None:
    families = {f.name: f for f in merged({"n2": parsed(snapshot(2)), "n1": parsed(snapshot(1))})}
    counted = {
        x.labels["node"]: x.value
        for x in families["modelforge_agent_invokes"].samples
        if x.name == "modelforge_agent_invokes_total"
    }
    assert counted == {"n1": 1.0, "n2": 2.0}


@pytest.mark.parametrize(
    "text",
    [
        "# TYPE modelforge_requests counter\nmodelforge_requests_total 1\n",  # the gateway's own
        'modelforge_agent_invokes_total{code="OK" 1\n',  # does not parse
    ],
)
def test_a_snapshot_that_is_not_an_agents_own_is_refused(text: str) -> None:
    with pytest.raises(ValueError):  # noqa: PT011  (the parser's own error, or ours)
        parsed(text)


def test_an_agents_snapshot_carries_its_process_metrics_under_its_own_names() -> None:
    families = {family.name: family for family in parsed(snapshot(0))}
    cpu = families["modelforge_agent_process_cpu_seconds"]
    assert cpu.type == "counter"
    assert [x.name for x in cpu.samples] == ["modelforge_agent_process_cpu_seconds_total"]
    assert families["modelforge_agent_process_resident_memory_bytes"].samples[0].value > 0
    assert "modelforge_agent_process_open_fds" in families
    assert not any(name.startswith("process_") for name in families)  # the gateway's own names


def invokes_by_node(fleet: FleetMetrics) -> dict[str, float]:
    """What a scrape shows: each node's invoke count."""
    return {
        x.labels["node"]: x.value
        for family in fleet.collect()
        if family.name == "modelforge_agent_invokes"
        for x in family.samples
        if x.name == "modelforge_agent_invokes_total"
    }


async def heard(fleet: FleetMetrics, node: str, text: str) -> None:
    await fleet._heard(Msg(cast(Any, None), subject=f"mf.metrics.{node}", data=text.encode()))


def fleet_of(live: set[str]) -> FleetMetrics:
    return FleetMetrics(cast(Client, None), lambda node: node in live)


async def test_a_scrape_shows_each_live_nodes_latest_snapshot() -> None:
    fleet = fleet_of({"n1", "n2"})
    await heard(fleet, "n1", snapshot(1))
    await heard(fleet, "n2", snapshot(5))
    await heard(fleet, "n2", snapshot(2))
    assert invokes_by_node(fleet) == {"n1": 1.0, "n2": 2.0}


async def test_a_node_no_longer_live_drops_out_of_the_scrape() -> None:
    live = {"n1", "n2"}
    fleet = fleet_of(live)
    await heard(fleet, "n1", snapshot(1))
    await heard(fleet, "n2", snapshot(2))
    assert invokes_by_node(fleet) == {"n1": 1.0, "n2": 2.0}
    live.discard("n2")
    assert invokes_by_node(fleet) == {"n1": 1.0}


async def test_a_snapshot_that_does_not_parse_leaves_the_nodes_last_good_one_shown() -> None:
    fleet = fleet_of({"n1"})
    await heard(fleet, "n1", snapshot(3))
    assert invokes_by_node(fleet) == {"n1": 3.0}
    await heard(fleet, "n1", "# TYPE modelforge_requests counter\nmodelforge_requests_total 1\n")
    assert invokes_by_node(fleet) == {"n1": 3.0}


async def test_a_snapshot_is_parsed_once_by_the_scrape_that_first_shows_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parses: list[str] = []

    def counted(text: str) -> Any:
        parses.append(text)
        return parsed(text)

    monkeypatch.setattr(fleet_metrics, "parsed", counted)
    fleet = fleet_of({"n1"})
    for served in (4, 5, 6):  # three telemetry rounds between two scrapes
        await heard(fleet, "n1", snapshot(served))
    assert parses == []
    assert invokes_by_node(fleet) == {"n1": 6.0}
    assert invokes_by_node(fleet) == {"n1": 6.0}
    assert len(parses) == 1
