"""Telemetry names each resident deployment's worker and what that process holds (its RSS on the
CPU device), and stops naming it once an unload has killed the worker."""

from __future__ import annotations

from collections.abc import Callable

import msgspec
from nats.aio.subscription import Subscription

from eventstore.connection import Connection
from streams import subjects
from streams.events import serving as s
from streams.messages import AcceleratorTelemetry
from tests.integration.nodeagent.test_agent_serving import load, unload
from tests.support.agents import WAIT_S, AgentProcess

DEPLOYMENT = "dep-worker-memory"


async def next_sample(
    samples: Subscription, wanted: Callable[[AcceleratorTelemetry], bool]
) -> AcceleratorTelemetry:
    """The next telemetry sample `wanted` accepts (each interval brings one)."""
    while True:
        sample = msgspec.json.decode((await samples.next_msg(timeout=WAIT_S)).data, type=AcceleratorTelemetry)
        if wanted(sample):
            return sample


def worker_figures(sample: AcceleratorTelemetry) -> dict[str, int]:
    return {w.deployment_id: w.bytes for w in sample.workers}


async def test_telemetry_names_a_loaded_deployments_worker_memory_until_it_is_unloaded(
    connection: Connection, serving_agent: AgentProcess, minilm_manifest: list[dict[str, object]]
) -> None:
    samples = await connection.client.subscribe(
        subjects.telemetry_subject(serving_agent.node, f"{serving_agent.node}-cpu0")
    )
    try:
        loaded = await load(connection, serving_agent, DEPLOYMENT, minilm_manifest)
        assert isinstance(loaded, s.ResidencyLoaded), loaded
        while_loaded = await next_sample(samples, lambda t: DEPLOYMENT in t.residencies)
        figure = worker_figures(while_loaded)[DEPLOYMENT]
        assert figure > 0
        assert figure <= while_loaded.used_bytes  # the worker's share of the device's memory

        unloaded = await unload(connection, serving_agent, DEPLOYMENT)
        assert isinstance(unloaded, s.ResidencyUnloaded), unloaded
        after = await next_sample(samples, lambda t: DEPLOYMENT not in t.residencies)
        assert DEPLOYMENT not in worker_figures(after)
    finally:
        await samples.unsubscribe()
