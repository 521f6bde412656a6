"""The agents' metrics snapshots as the gateway reads them: their families merged across nodes,
each sample labelled by node; a snapshot that does not parse or holds another's family is refused."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.serving.fleet_metrics import merged, parsed
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
