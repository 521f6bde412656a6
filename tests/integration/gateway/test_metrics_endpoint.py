"""`GET /metrics` after real traffic, read with prometheus_client's own parser."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.gateway.conftest import SHARES_THE_STACK, Stack

pytestmark = SHARES_THE_STACK

EMBEDDING = "rag.embedding@1"
SERVED = 3


async def scrape(stack: Stack) -> dict[str, Metric]:
    async with httpx.AsyncClient() as http:
        response = await http.get(f"{stack.gateway.url}/metrics")
    assert response.status_code == 200
    return {family.name: family for family in text_string_to_metric_families(response.text)}


def value(family: Metric, name: str, **labels: str) -> float:
    found = [x.value for x in family.samples if x.name == name and x.labels == labels]
    return found[0] if found else 0.0


@pytest.fixture(scope="module")
async def traffic(stack: Stack) -> tuple[dict[str, Metric], dict[str, Metric]]:
    """The metrics before and after SERVED embeddings and one refused request."""
    before = await scrape(stack)
    headers = {"authorization": f"Bearer {stack.key.key}"}
    async with httpx.AsyncClient(base_url=stack.gateway.url, headers=headers, timeout=60) as http:
        for n in range(SERVED):
            served = await http.post("/v1/embeddings", json={"input": f"sentence {n}"})
            assert served.status_code == 200, served.text
        refused = await http.post("/v1/embeddings", json={"model": "all-MiniLM-L6-v2"})
        assert (refused.status_code, refused.json()["error"]["code"]) == (422, "INVALID_INPUT")
    return before, await scrape(stack)


async def test_every_family_has_help_and_a_type(traffic: tuple[dict[str, Metric], dict[str, Metric]]) -> None:
    _, after = traffic
    assert after
    for family in after.values():
        assert family.documentation, family.name
        assert family.type in {"counter", "gauge", "histogram", "info"}, family.name


async def test_the_request_counter_counts_the_requests_made(
    traffic: tuple[dict[str, Metric], dict[str, Metric]],
) -> None:
    before, after = traffic
    assert after["modelforge_requests"].type == "counter"

    def made(code: str, status: str) -> float:
        labels = {"capability": EMBEDDING, "code": code, "status": status}
        name = "modelforge_requests_total"
        return value(after["modelforge_requests"], name, **labels) - value(
            before["modelforge_requests"], name, **labels
        )

    assert made("OK", "200") == SERVED
    assert made("INVALID_INPUT", "422") == 1


async def test_request_latency_and_its_stages_are_histograms_in_seconds(
    traffic: tuple[dict[str, Metric], dict[str, Metric]],
) -> None:
    before, after = traffic
    duration, stages = after["modelforge_request_duration_seconds"], after["modelforge_request_stage_seconds"]
    assert duration.type == stages.type == "histogram"
    count = "modelforge_request_duration_seconds_count"
    assert (
        value(duration, count, capability=EMBEDDING)
        - value(before["modelforge_request_duration_seconds"], count, capability=EMBEDDING)
        == SERVED + 1
    )
    for stage in ("queue", "scheduling", "load", "dispatch", "engine"):
        assert (
            value(stages, "modelforge_request_stage_seconds_count", capability=EMBEDDING, stage=stage)
            >= SERVED
        )
    # a served embedding's round trip is well under a second: the unit is seconds, not milliseconds
    dispatched = value(stages, "modelforge_request_stage_seconds_sum", capability=EMBEDDING, stage="dispatch")
    assert 0 < dispatched < SERVED * 1.0


async def test_placement_verdicts_and_scheduler_counters_are_exposed(
    traffic: tuple[dict[str, Metric], dict[str, Metric]],
) -> None:
    _, after = traffic
    for name in ("modelforge_placement_decisions", "modelforge_placement_rejections", "modelforge_evictions"):
        assert after[name].type == "counter", name
    decisions = after["modelforge_placement_decisions"]
    assert value(decisions, "modelforge_placement_decisions_total", verdict="ADMIT") >= SERVED


async def test_each_accelerators_books_and_pressure_are_gauges(
    stack: Stack, traffic: tuple[dict[str, Metric], dict[str, Metric]]
) -> None:
    _, after = traffic
    for name in (
        "modelforge_accelerator_resident_bytes",
        "modelforge_accelerator_leased_bytes",
        "modelforge_accelerator_schedulable_bytes",
        "modelforge_accelerator_leases",
        "modelforge_accelerator_pressure_level",
    ):
        family = after[name]
        assert family.type == "gauge"
        assert {x.labels["node"] for x in family.samples} == {stack.node}, name
    resident = after["modelforge_accelerator_resident_bytes"].samples
    assert all(x.value > 0 for x in resident)  # MiniLM is loaded


async def test_queue_depth_background_writes_and_process_metrics_are_exposed(
    traffic: tuple[dict[str, Metric], dict[str, Metric]],
) -> None:
    _, after = traffic
    for name in (
        "modelforge_queued_requests",
        "modelforge_queued_requests_all_gateways",
        "modelforge_background_writes",
        "process_resident_memory_bytes",
    ):
        assert after[name].type == "gauge", name
    assert after["process_cpu_seconds"].type == "counter"


async def test_the_event_logs_leader_is_a_gauge_that_is_0_while_it_has_one(
    traffic: tuple[dict[str, Metric], dict[str, Metric]],
) -> None:
    _, after = traffic
    family = after["modelforge_event_log_leaderless"]
    assert family.type == "gauge"
    assert value(family, "modelforge_event_log_leaderless") == 0


async def test_the_client_limits_families_are_scraped(
    traffic: tuple[dict[str, Metric], dict[str, Metric]],
) -> None:
    _, after = traffic
    for name in ("modelforge_limit_stream_leaderless", "modelforge_limit_stream_outages"):
        assert name in after, sorted(after)
