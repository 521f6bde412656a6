"""RequestLimiter.acquire + release, and a deployment cap's slot (DeploymentGate.enter + release),
vs one raw JetStream publish round trip, sequential.

Starts its own nats-server (from the wheel) in a temporary folder; prints latencies and ratios.
    .venv/bin/python -m bench.limits [--count 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from eventstore.connection import connect
from gateway.clients.limit_streams import provision_limits
from gateway.clients.limits import RequestLimiter
from gateway.clients.model import ClientPrincipal
from gateway.deployments.model import DeploymentState
from gateway.serving.caps import DeploymentGate
from modelforge.devstack.nats_server import start_nats
from modelforge.devstack.processes import stop_pid
from streams.codes import ServingError
from streams.events import serving as s


def who(client_id: str, rpm: int, concurrency: int) -> ClientPrincipal:
    return ClientPrincipal(client_id, client_id, frozenset(), rpm, concurrency, 0, None, "cred")


def capped(deployment_id: str, concurrency: int, queue_depth: int) -> DeploymentState:
    envelope = s.ResourceEnvelope(required_bytes=1, peak_bytes=1, per_request_bytes=1, cold_load_ms=1.0)
    return DeploymentState(
        deployment_id=deployment_id,
        capability="rag.embedding@1",
        candidate_id="c",
        artifact_set_id="a",
        model_name=deployment_id,
        channel="experiment",
        envelope=envelope,
        residency=s.ResidencyPolicy(),
        embedding_space=None,
        caps=s.DeploymentCaps(max_concurrency=concurrency, max_queue_depth=queue_depth),
    )


async def per_op_ms(count: int, op: Callable[[int], Awaitable[object]]) -> float:
    start = time.perf_counter()
    for i in range(count):
        await op(i)
    return (time.perf_counter() - start) / count * 1000


async def main(count: int) -> None:
    server = start_nats(Path(tempfile.mkdtemp(prefix="mf-bench-")), detach=False)
    try:
        connection = await connect(server.url, "bench")
        client = connection.client
        await provision_limits(client)
        limiter = RequestLimiter(client)
        await client.jetstream().add_stream(name="RAW", subjects=["raw.>"], storage="memory")  # type: ignore[arg-type]

        async def raw(i: int) -> None:
            await client.request("raw.x", b"", 2.0)

        async def admitted(i: int) -> None:
            permit = await limiter.acquire(who("bench_ok", 10**9, 8))
            await permit.release()

        held = [await limiter.acquire(who("bench_full", 10**9, 2)) for _ in range(2)]
        other = RequestLimiter(client)  # another replica: it does not know which slots are held

        async def queue_full(i: int) -> None:
            with contextlib.suppress(ServingError):
                await other.acquire(who("bench_full", 10**9, 2))

        await limiter.acquire(who("bench_rate", 1, 100))

        async def rate_limited(i: int) -> None:
            with contextlib.suppress(ServingError):
                await limiter.acquire(who("bench_rate", 1, 100))

        gate = DeploymentGate(limiter, client)

        async def deployment_slot(i: int) -> None:
            permit = await gate.enter(capped("bench_dep", 8, 64), time.time() + 30)
            assert permit is not None
            await permit.release()

        full = capped("bench_dep_full", 1, 0)  # its one slot held, nobody may wait
        held_run = await gate.enter(full, time.time() + 30)
        other_gate = DeploymentGate(other, client)

        async def deployment_full(i: int) -> None:
            with contextlib.suppress(ServingError):
                await other_gate.enter(full, time.time() + 30)

        base = await per_op_ms(count, raw)
        print(f"raw JetStream publish round trip     {base:7.3f} ms")
        acquire_s = release_s = 0.0
        for _ in range(count):
            start = time.perf_counter()
            permit = await limiter.acquire(who("bench_split", 10**9, 8))
            middle = time.perf_counter()
            await permit.release()
            acquire_s, release_s = acquire_s + middle - start, release_s + time.perf_counter() - middle
        for label, ms in (("acquire (admitted)", acquire_s), ("release", release_s)):
            ms = ms / count * 1000
            print(f"{label:36s} {ms:7.3f} ms  = {ms / base:4.1f}x raw")
        for label, op in (
            ("acquire + release (admitted)", admitted),
            ("acquire refused: QUEUE_FULL", queue_full),
            ("acquire refused: RATE_LIMITED", rate_limited),
            ("deployment slot: enter + release", deployment_slot),
            ("deployment refused: QUEUE_FULL", deployment_full),
        ):
            ms = await per_op_ms(count, op)
            print(f"{label:36s} {ms:7.3f} ms  = {ms / base:4.1f}x raw")
        for permit in [*held, held_run]:
            if permit is not None:
                await permit.release()
        await connection.close()
    finally:
        stop_pid(server.pid)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=2000)
    asyncio.run(main(parser.parse_args().count))
