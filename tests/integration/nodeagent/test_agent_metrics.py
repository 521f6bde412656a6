"""A real agent process's Prometheus endpoint (`--metrics-port`), read with prometheus_client's parser
after a load job, served invokes and a refused one."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import msgspec
import pytest
from prometheus_client.parser import text_string_to_metric_families

from eventstore.connection import Connection
from modelforge.devstack.processes import free_port
from streams import codes, subjects
from streams.events import serving as s
from streams.messages import InvokeReply
from tests.support.agents import AgentProcess

from .test_agent_serving import invoke, load

EMBEDDING = "rag.embedding@1"
DEPLOYMENT = "dep-metered"
SERVED = 3

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


async def scrape(port: int) -> Samples:
    async with httpx.AsyncClient() as http:
        response = await http.get(f"http://127.0.0.1:{port}/metrics")
    assert response.status_code == 200
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture(scope="module")
async def metered(
    nats_url: str,
    connection: Connection,
    artifact_root: Path,
    tmp_path_factory: pytest.TempPathFactory,
    minilm_manifest: list[dict[str, object]],
) -> AsyncIterator[tuple[AgentProcess, Samples, Samples]]:
    """An agent with its metrics on a free port; the samples before, and after a load job, SERVED
    invokes and one that is not an InvokeRequest."""
    port = free_port()
    log_dir = tmp_path_factory.mktemp("metered")
    agent = AgentProcess(
        nats_url, f"node-metered-{port}", artifact_root, log_dir, **{"--metrics-port": str(port)}
    )
    await agent.start(connection)
    try:
        before = await scrape(port)
        assert isinstance(await load(connection, agent, DEPLOYMENT, minilm_manifest), s.ResidencyLoaded)
        for n in range(SERVED):
            reply = await invoke(connection, agent.node, DEPLOYMENT, [f"sentence {n}"])
            assert reply.ok, reply.message
        subject = subjects.invoke_subject(agent.node, DEPLOYMENT)
        refused = msgspec.json.decode(
            (await connection.client.request(subject, b"{}", 30)).data, type=InvokeReply
        )
        assert refused.code == codes.INVALID_INPUT.code
        yield agent, before, await scrape(port)
    finally:
        agent.stop()


async def test_invokes_are_counted_by_capability_and_outcome(
    metered: tuple[AgentProcess, Samples, Samples],
) -> None:
    _, before, after = metered
    name = "modelforge_agent_invokes_total"
    assert (
        value(after, name, capability=EMBEDDING, code="OK")
        - value(before, name, capability=EMBEDDING, code="OK")
        == SERVED
    )
    assert value(after, name, capability=EMBEDDING, code=codes.INVALID_INPUT.code) == 1


async def test_invoke_latency_is_a_histogram_in_seconds(
    metered: tuple[AgentProcess, Samples, Samples],
) -> None:
    _, _, after = metered
    count = value(after, "modelforge_agent_invoke_duration_seconds_count", capability=EMBEDDING)
    assert count == SERVED + 1
    assert value(after, "modelforge_agent_invoke_duration_seconds_sum", capability=EMBEDDING) > 0


async def test_the_load_job_is_counted_with_its_outcome(
    metered: tuple[AgentProcess, Samples, Samples],
) -> None:
    _, _, after = metered
    assert value(after, "modelforge_agent_jobs_total", op="load", outcome="recorded") == 1
    assert value(after, "modelforge_agent_job_duration_seconds_count", op="load") == 1


async def test_each_residency_shows_its_workers_memory(
    metered: tuple[AgentProcess, Samples, Samples],
) -> None:
    agent, before, after = metered
    labels = {"deployment": DEPLOYMENT, "accelerator": f"{agent.node}-cpu0", "capability": EMBEDDING}
    assert value(after, "modelforge_agent_worker_memory_bytes", **labels) > 10 << 20  # MiniLM's worker
    assert ("modelforge_agent_worker_memory_bytes", tuple(sorted(labels.items()))) not in before


async def test_the_agent_serves_no_metrics_unless_a_port_is_set(
    agents: Callable[..., AgentProcess],
    connection: Connection,
    metered: tuple[AgentProcess, Samples, Samples],
) -> None:
    unmetered = agents("node-unmetered")
    await unmetered.start(connection)
    assert "agent metrics on http://127.0.0.1:" in metered[0].log.read_text()
    assert "agent metrics on" not in unmetered.log.read_text()
