"""The agents' metrics on the gateway's `/metrics`, labelled by node: a real agent's snapshot
(sent with its telemetry) after real invokes, its process metrics and its worker's included, read
with prometheus_client's own parser."""

from __future__ import annotations

import asyncio

import httpx
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from streams import subjects
from tests.integration.gateway.conftest import SHARES_THE_STACK, Stack

pytestmark = SHARES_THE_STACK

EMBEDDING = "rag.embedding@1"
SERVED = 2


def invokes(families: dict[str, Metric], **labels: str) -> float:
    family = families.get("modelforge_agent_invokes")
    samples = family.samples if family else []
    wanted = {"capability": EMBEDDING, "code": "OK", **labels}
    return sum(x.value for x in samples if x.name == "modelforge_agent_invokes_total" and x.labels == wanted)


def parsed(text: str) -> dict[str, Metric]:
    return {family.name: family for family in text_string_to_metric_families(text)}


async def snapshots_until_served(stack: Stack) -> None:
    """Wait (on the agent's own snapshots) until one counts the invokes served, then one more:
    the gateway, hearing them in order, holds that one by then."""
    heard: asyncio.Queue[bytes] = asyncio.Queue()

    async def on_snapshot(msg: object) -> None:
        await heard.put(msg.data)  # type: ignore[attr-defined]

    subscription = await stack.connection.client.subscribe(
        subjects.agent_metrics_subject(stack.node), cb=on_snapshot
    )
    try:
        async with asyncio.timeout(60):
            while invokes(parsed((await heard.get()).decode())) < SERVED:
                pass  # each turn waits on the next snapshot
            await heard.get()
    finally:
        await subscription.unsubscribe()


async def test_the_gateway_exports_a_real_agents_metrics_labelled_by_its_node(stack: Stack) -> None:
    headers = {"authorization": f"Bearer {stack.key.key}"}
    async with httpx.AsyncClient(base_url=stack.gateway.url, headers=headers, timeout=60) as http:
        for n in range(SERVED):
            served = await http.post("/v1/embeddings", json={"input": f"fleet {n}"})
            assert served.status_code == 200, served.text
        await snapshots_until_served(stack)
        scraped = await http.get("/metrics")

    assert scraped.status_code == 200
    families = parsed(scraped.text)  # the whole page parses, the agents' families included
    assert invokes(families, node=stack.node) >= SERVED
    duration = families["modelforge_agent_invoke_duration_seconds"]
    assert duration.type == "histogram"
    assert duration.documentation
    assert {x.labels["node"] for x in duration.samples} == {stack.node}
    assert "process_cpu_seconds" in families  # the gateway's own process metrics, not shadowed
    assert all("node" not in x.labels for x in families["process_resident_memory_bytes"].samples)
    # the agent's, under its own names, per node
    for name in ("modelforge_agent_process_resident_memory_bytes", "modelforge_agent_process_open_fds"):
        (sample,) = families[name].samples
        assert sample.labels == {"node": stack.node}
        assert sample.value > 0
    agent_cpu = families["modelforge_agent_process_cpu_seconds"]
    assert agent_cpu.type == "counter"
    assert agent_cpu.documentation
    # and the worker serving the embeddings: its host memory and CPU time
    (worker_rss,) = families["modelforge_agent_worker_resident_memory_bytes"].samples
    assert worker_rss.labels["node"] == stack.node
    assert worker_rss.labels["capability"] == EMBEDDING
    assert worker_rss.value > 10 * 2**20  # an interpreter with a model loaded
    (worker_cpu,) = [
        x for x in families["modelforge_agent_worker_cpu_seconds"].samples if x.name.endswith("_total")
    ]
    assert worker_cpu.value > 0
