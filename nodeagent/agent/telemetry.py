"""Telemetry: each accelerator's memory (the device's; on the CPU device, the agent's and its
workers' RSS), each resident deployment's worker's own, and the agent's liveness, every interval, on
`mf.tel.<node>.<accelerator>` (MF_TELEMETRY keeps the last value per subject). The wait between
observations is a timer on the stop event, never a sleep loop. A clean stop sends `healthy=False`
so the gateway need not wait for staleness. With each healthy round goes the agent's metrics
snapshot, on core NATS (`mf.metrics.<node>`: not stored), for the gateway's fleet-wide `/metrics`.

A sample is sent again while MF_TELEMETRY has no leader (a cluster electing one after the server that
led it left), for up to one interval: the gateway declares a node lost two intervals after its last
sample's observation, so one sample lost to an election would make a live node lost (and drop its
work) whenever the next sample comes a little late.

Each drop of the agent's connection is counted in its samples (`reconnects`), and a sample is sent
at once after it (`count_drops`): an invoke on its way through the lost server never arrived, and
the rise tells the gateway waiting for its reply to try it again rather than wait for its deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from functools import partial

import msgspec
from nats.aio.client import Client

from eventstore.connection import Connection
from eventstore.replies import resend_while_leaderless
from nodeagent.agent.hardware import Accelerator, Hardware
from streams import subjects
from streams.messages import AcceleratorTelemetry, WorkerMemory

log = logging.getLogger("modelforge.agent.telemetry")

_encoder = msgspec.json.Encoder()


def observe(
    node_id: str,
    accelerator: Accelerator,
    generation: int,
    residencies: list[str],
    pids: list[int],
    healthy: bool,
    interval_s: float,
    cached_sets: list[str],
    workers: Sequence[tuple[str, int]] = (),  # each resident's deployment and its worker's pid
    reconnects: int = 0,
) -> AcceleratorTelemetry:
    reading = accelerator.read_memory(pids)
    held = [(deployment_id, accelerator.read_process(pid)) for deployment_id, pid in workers]
    return AcceleratorTelemetry(
        node_id=node_id,
        accelerator_id=accelerator.id,
        generation=generation,
        total_bytes=reading.total_bytes,
        used_bytes=reading.used_bytes,
        process_bytes=reading.process_bytes,
        observed_at_unix_ms=time.time_ns() // 1_000_000,
        residencies=residencies,
        healthy=healthy,
        interval_s=interval_s,
        cached_sets=cached_sets,
        workers=[WorkerMemory(d, memory.current_bytes) for d, memory in held if memory is not None],
        reconnects=reconnects,
    )


class TelemetryPublisher:
    def __init__(
        self,
        client: Client,
        hardware: Hardware,
        generation: int,
        residencies_of: Callable[[str], list[str]],
        pids_of: Callable[[str], list[int]],
        interval_s: float,
        cached_sets: Callable[[], list[str]] = list,
        metrics_snapshot: Callable[[], bytes] | None = None,
        workers_of: Callable[[str], list[tuple[str, int]]] = lambda _: [],
    ) -> None:
        self.client = client
        self.metrics_snapshot = metrics_snapshot
        self.js = client.jetstream()
        self.cached_sets = cached_sets
        self.hardware = hardware
        self.generation = generation
        self.residencies_of = residencies_of
        self.pids_of = pids_of
        self.workers_of = workers_of
        self.interval_s = interval_s
        self.reconnects = 0  # drops of the agent's connection so far (`count_drops`)
        self.nudge = asyncio.Event()  # set: send the next samples now, not at the interval

    async def publish_all(self, healthy: bool = True) -> None:
        for accelerator in self.hardware.accelerators:
            sample = observe(
                self.hardware.node_id,
                accelerator,
                self.generation,
                self.residencies_of(accelerator.id),
                self.pids_of(accelerator.id),
                healthy,
                self.interval_s,
                self.cached_sets(),
                self.workers_of(accelerator.id),
                self.reconnects,
            )
            subject = subjects.telemetry_subject(self.hardware.node_id, accelerator.id)
            data = _encoder.encode(sample)
            timeout = max(1.0, self.interval_s)
            try:
                await resend_while_leaderless(
                    partial(self.js.publish, subject, data, timeout=timeout), self.interval_s
                )
            except Exception as error:  # a missed observation is only staleness; keep observing
                log.warning("telemetry for %s not published: %s", accelerator.id, type(error).__name__)
        if healthy and self.metrics_snapshot is not None:
            subject = subjects.agent_metrics_subject(self.hardware.node_id)
            try:
                await self.client.publish(subject, self.metrics_snapshot())
            except Exception as error:  # the next round sends a newer one
                log.warning("metrics snapshot not published: %s", type(error).__name__)

    async def run(self, stop: asyncio.Event) -> None:
        stopping = asyncio.ensure_future(stop.wait())
        stopping.add_done_callback(lambda _: self.nudge.set())
        try:
            while not stop.is_set():
                self.nudge.clear()
                await self.publish_all()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.interval_s):
                        await self.nudge.wait()
        finally:
            stopping.cancel()
        await self.publish_all(healthy=False)

    def count_drops(self, connection: Connection) -> None:
        """Count each drop of `connection` in the samples, and send them at once (nats-py sends
        them when it is connected to another server)."""

        def dropped() -> None:
            connection.watch_drop("telemetry-reconnects", dropped)  # and the next drop
            self.reconnects += 1
            self.nudge.set()

        connection.watch_drop("telemetry-reconnects", dropped)
