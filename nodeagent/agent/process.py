"""The agent process: connect (outbound only), register, start a generation, answer its liveness
subject, then publish telemetry, consume control jobs and serve invokes until told to stop.

A stop (SIGTERM, SIGINT) stops taking jobs — the one in progress stays unacked and is delivered to
the next generation — tells the gateway the node is unhealthy, and drains the connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from dataclasses import dataclass
from pathlib import Path

import uvloop

from eventstore.connection import connect
from eventstore.store import EventStore
from nodeagent.agent.hardware import DEFAULT_CPU_MEMORY_BUDGET, detect
from nodeagent.agent.invoke import InvokeServer
from nodeagent.agent.jobs import JobConsumer
from nodeagent.agent.liveness import answer_liveness
from nodeagent.agent.metrics import AgentMetrics
from nodeagent.agent.operations import AgentState, Operations
from nodeagent.agent.registration import start_generation
from nodeagent.agent.spare import SpareWorker
from nodeagent.agent.telemetry import TelemetryPublisher
from nodeagent.runtimes.gpu import ctranslate2_cuda_count, tensorrt_installed
from nodeagent.settings import DEFAULT_ARTIFACT_CACHE_BYTES, DEFAULT_CPU_THREADS
from streams import subjects, tracing
from streams.envelope import Actor, ActorKind

log = logging.getLogger("modelforge.agent")


@dataclass(frozen=True)
class AgentConfig:
    node_id: str
    artifact_root: Path
    nats_url: str | None = None
    cpu_memory_budget: int = DEFAULT_CPU_MEMORY_BUDGET
    telemetry_interval_s: float = 5.0
    job_ack_wait_s: float = 30.0
    job_attempts: int = 4  # runs of one job before it is recorded failed
    fetch_expiry_s: float = 5.0
    cpu_threads: int = DEFAULT_CPU_THREADS
    artifact_cache_bytes: int = DEFAULT_ARTIFACT_CACHE_BYTES
    metrics_host: str = "127.0.0.1"
    metrics_port: int = 0  # 0: no metrics endpoint
    spare_worker: bool = True  # a worker started ahead of the next load (nodeagent/agent/spare.py)


def node_runtimes(gpus: bool) -> tuple[str, ...]:
    """The runtimes this node's workers load models with (a probe's envelope names one of them)."""
    runtimes = ["tensorrt"] if gpus and tensorrt_installed() else []
    runtimes.append("onnxruntime-cpu")
    if gpus and ctranslate2_cuda_count() > 0:
        runtimes.append("ctranslate2-cuda")
    return (*runtimes, "ctranslate2-cpu")


async def run_agent(config: AgentConfig, stop: asyncio.Event) -> None:
    node_id = subjects.token(config.node_id, "node id")
    artifact_root = config.artifact_root.resolve(strict=True)
    hardware = detect(node_id, config.cpu_memory_budget)
    gpus = any(a.is_gpu for a in hardware.accelerators)
    runtimes = node_runtimes(gpus)
    connection = await connect(config.nats_url, f"agent-{node_id}")
    actor = Actor(ActorKind.AGENT, node_id)
    metrics = AgentMetrics()
    invokes = InvokeServer(connection.client, node_id, metrics)
    invokes.resend_on_drop(connection)
    state: AgentState | None = None
    telemetry_task: asyncio.Task[None] | None = None
    jobs_task: asyncio.Task[None] | None = None
    try:
        generation = await start_generation(EventStore(connection), hardware, runtimes, actor)
        await answer_liveness(connection.client, node_id)
        state = AgentState(
            node_id,
            artifact_root,
            hardware,
            generation,
            EventStore(connection),
            invokes,
            actor,
            cpu_threads=config.cpu_threads,
            cache_budget_bytes=config.artifact_cache_bytes,
            spare=SpareWorker(config.spare_worker),
        )
        metrics.watch(hardware, state.resident_workers)
        if config.metrics_port:
            metrics.serve(config.metrics_host, config.metrics_port)
        telemetry = TelemetryPublisher(
            connection.client,
            hardware,
            generation,
            state.residencies_on,
            state.pids_on,
            config.telemetry_interval_s,
            state.cache.held_set_ids,
            metrics_snapshot=metrics.snapshot,
            workers_of=state.workers_on,
        )
        telemetry.count_drops(connection)
        consumer = JobConsumer(
            connection.client,
            node_id,
            Operations(state),
            ack_wait_s=config.job_ack_wait_s,
            attempts=config.job_attempts,
            fetch_expiry_s=config.fetch_expiry_s,
            metrics=metrics,
        )
        await state.spare.fill()  # for the first load, which a starting stack sends within a second
        loop = asyncio.get_running_loop()
        # The job consumer exists before the first (healthy) telemetry says this node is live.
        jobs_task = loop.create_task(consumer.run(stop, await consumer.bind()))
        telemetry_task = loop.create_task(telemetry.run(stop))
        log.info(
            "agent %s ready: generation %d, %d accelerator(s)",
            node_id,
            generation,
            len(hardware.accelerators),
        )
        stopped = loop.create_task(stop.wait())
        await asyncio.wait([stopped, telemetry_task, jobs_task], return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        for task in (telemetry_task, jobs_task):
            if task.done() and task.exception() is not None:
                raise RuntimeError(f"agent {node_id} stopped on an error") from task.exception()
    finally:
        stop.set()
        if jobs_task is not None:
            jobs_task.cancel()  # an unfinished job stays unacked and goes to the next generation
        for pending in (jobs_task, telemetry_task):  # telemetry ends by sending healthy=False
            if pending is not None:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await pending
        await invokes.close()
        if state is not None:
            await state.close()
        await connection.close()


def main(config: AgentConfig) -> int:
    tracing.install("modelforge-agent")

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await run_agent(config, stop)

    with contextlib.suppress(KeyboardInterrupt):
        uvloop.run(run())
    return 0
