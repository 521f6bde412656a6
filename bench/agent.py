"""MiniLM through the agent vs direct ONNX Runtime calls, at 1, 8 and 64 concurrent callers.

(a) direct: callers on threads call the runtime with one text each (preprocess, run, pool) — the
    raw limit of this machine's ONNX Runtime for single-text requests;
(b) agent: callers send one-text invokes by core NATS request-reply to a real `modelforge agent`
    subprocess, whose worker process for the deployment batches concurrent invokes dynamically and
    replies with contract JSON; also the p50 of each round trip less the model server's own
    timings (what NATS, the agent and the worker hop add).
Then the worker hop alone, one caller: (c) the capability server in this process
(`server.serve(payload)`, as the agent ran it before each model had a worker) vs (d) the same
payload through a worker process over its socket (`Worker.invoke`), each request both ways in turn;
the median of (d) − (c) is what the hop adds per request. Twice: one text a request, and an input
the contract refuses (the hop with no inference behind it).
Starts its own nats-server (from the wheel) in a temporary folder; prints rates, p50s and ratios.
    .venv/bin/python -m bench.agent [--seconds 4] [--callers 1 8 64]
Targets: (b)/(a) throughput ≥ 0.9 at 64 callers; (d) − (c) ≤ 0.2 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import msgspec
import uvloop

from artifacts import build_manifest, verify_artifact_set
from eventstore.connection import Connection, connect
from eventstore.provision import provision
from eventstore.subscription import subscribe
from modelforge.devstack.nats_server import start_nats
from modelforge.devstack.processes import stop_pid
from nodeagent.adapters.base import run_rows
from nodeagent.adapters.embedding import EmbeddingAdapter
from nodeagent.agent.residency import manifest_from_job
from nodeagent.agent.workers import Worker
from nodeagent.models.pull import pull_minilm
from nodeagent.runtimes.base import RuntimeOptions
from nodeagent.runtimes.onnx import OnnxRuntimeCpu
from nodeagent.settings import DEFAULT_CPU_THREADS
from nodeagent.worker.loading import load_blocking
from nodeagent.worker.protocol import Load
from streams import subjects
from streams.codes import ServingError
from streams.contracts import EmbeddingInput
from streams.envelope import new_id
from streams.events import serving as s
from streams.messages import AcceleratorTelemetry, InvokeReply, InvokeRequest, LoadJob

NODE, DEPLOYMENT = "bench-node", "bench-minilm"
TEXTS = [
    f"{subject} {verb} the {thing} before the {when} review, according to note {i}"
    for i, (subject, verb, thing, when) in enumerate(
        [
            (a, b, c, d)
            for a in ("the team", "our gateway", "a scheduler")
            for b in ("checked", "moved")
            for c in ("embedding index", "GPU lease", "release plan")
            for d in ("weekly", "final")
        ]
    )
]
Result = tuple[int, list[float]]  # sequences done, latencies (ms)


def direct(adapter: EmbeddingAdapter, runtime: OnnxRuntimeCpu, callers: int, seconds: float) -> Result:
    end = time.perf_counter() + seconds
    latencies: list[float] = []
    lock = threading.Lock()

    def caller(index: int) -> None:
        mine = []
        i = index
        while time.perf_counter() < end:
            started = time.perf_counter()
            run_rows(adapter, runtime, [TEXTS[i % len(TEXTS)]])
            mine.append((time.perf_counter() - started) * 1000)
            i += callers
        with lock:
            latencies.extend(mine)

    with ThreadPoolExecutor(callers) as pool:
        list(pool.map(caller, range(callers)))
    return len(latencies), latencies


async def through_agent(
    connection: Connection, callers: int, seconds: float, outside: list[float] | None = None
) -> Result:
    """Callers' invokes through the agent; into `outside`, each round trip less the time the model
    server itself reported (queue, preprocess, inference, serialize): NATS, agent and worker hop."""
    subject = subjects.invoke_subject(NODE, DEPLOYMENT)
    decoder = msgspec.json.Decoder(InvokeReply)
    latencies: list[float] = []
    end = time.perf_counter() + seconds

    async def caller(index: int) -> None:
        i = index
        while time.perf_counter() < end:
            request = InvokeRequest(
                request_id=new_id(),
                capability="rag.embedding@1",
                deployment_id=DEPLOYMENT,
                deadline_unix_ms=time.time_ns() // 1_000_000 + 30_000,
                payload=msgspec.Raw(msgspec.json.encode(EmbeddingInput(texts=[TEXTS[i % len(TEXTS)]]))),
            )
            started = time.perf_counter()
            reply = decoder.decode(
                (await connection.client.request(subject, msgspec.json.encode(request), 30)).data
            )
            if not reply.ok:
                raise RuntimeError(f"invoke failed: {reply.code} {reply.message}")
            latencies.append((time.perf_counter() - started) * 1000)
            if outside is not None:
                t = reply.timings
                outside.append(latencies[-1] - t.queue_ms - t.preprocess_ms - t.inference_ms - t.serialize_ms)
            i += callers

    await asyncio.gather(*(caller(i) for i in range(callers)))
    return len(latencies), latencies


ONE_TEXT = [msgspec.json.encode(EmbeddingInput(texts=[text])) for text in TEXTS]
REFUSED = [b'{"texts": []}']  # refused by the contract's item check: the hop without inference


Call = Callable[[bytes], Awaitable[object]]


async def timed(call: Call, payload: bytes) -> float:
    started = time.perf_counter()
    with contextlib.suppress(ServingError):
        await call(payload)
    return (time.perf_counter() - started) * 1000


async def paired(first: Call, second: Call, payloads: list[bytes], seconds: float) -> tuple[Result, Result]:
    """One caller: each payload through `first`, then through `second`, in turn, so that the
    machine's drift (other processes, frequency) weighs on both alike."""
    ones: list[float] = []
    twos: list[float] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        payload = payloads[len(ones) % len(payloads)]
        ones.append(await timed(first, payload))
        twos.append(await timed(second, payload))
    return (len(ones), ones), (len(twos), twos)


async def worker_hop(root: Path, manifest: list[dict[str, object]], seconds: float) -> None:
    verified = verify_artifact_set(root / "minilm", manifest_from_job(manifest))
    warm = await asyncio.to_thread(load_blocking, verified, "rag.embedding@1", None, 64, DEFAULT_CPU_THREADS)
    worker = await Worker.spawn("bench-hop")
    loading = Load(
        str(verified.root),
        verified.manifest.to_dict(),
        verified.bytes_verified,
        "rag.embedding@1",
        None,
        64,
        DEFAULT_CPU_THREADS,
    )

    def through_worker(payload: bytes) -> Awaitable[object]:
        return worker.invoke(payload, 30.0)

    try:
        await worker.load(loading)
        for payloads, what in ((ONE_TEXT, "one text a request"), (REFUSED, "no inference: a refused input")):
            await paired(warm.server.serve, through_worker, payloads, 1.0)  # warm-up
            in_process, hop = await paired(warm.server.serve, through_worker, payloads, seconds)
            print(f"the worker hop alone (1 caller, no NATS; each request both ways in turn), {what}:")
            line("(c) server in this process", in_process, seconds)
            line("(d) through a worker process", hop, seconds)
            added = statistics.median(d - c for c, d in zip(in_process[1], hop[1], strict=True))
            print(f"  worker hop: {added:+.3f} ms per request (median of (d) − (c); target ≤ 0.2 ms)")
    finally:
        await worker.kill()
        await warm.server.close()
        warm.runtime.unload()


def minilm_home(prefix: str) -> tuple[Path, Path]:
    """A temporary folder for a bench's stack, and its artifact root holding MiniLM at `minilm/`."""
    home = Path(tempfile.mkdtemp(prefix=prefix))
    os.chmod(home, 0o755)  # PostgreSQL and the agent may run as other users
    pull_minilm(home / "artifacts" / "minilm", install_missing=False)
    return home, home / "artifacts"


def manifest_of(folder: Path) -> list[dict[str, object]]:
    return [
        {"path": f.path, "sha256": f.sha256, "size": f.size_bytes, "format": f.format.value}
        for f in build_manifest(folder).files
    ]


def spawn_agent(url: str, root: Path, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "modelforge.cli",
                "agent",
                "--node-id",
                NODE,
                "--artifact-root",
                str(root),
            ],
            env={**os.environ, "NATS_URL": url},
            stdout=out,
            stderr=subprocess.STDOUT,
        )


async def start_agent(connection: Connection, url: str, root: Path, log: Path) -> subprocess.Popen[bytes]:
    telemetry = await connection.client.subscribe(subjects.telemetry_subject(NODE, f"{NODE}-cpu0"))
    agent = spawn_agent(url, root, log)
    while not msgspec.json.decode(
        (await telemetry.next_msg(timeout=60)).data, type=AcceleratorTelemetry
    ).healthy:
        pass
    await telemetry.unsubscribe()
    return agent


async def load(connection: Connection, root: Path) -> s.ResidencyLoaded:
    job = LoadJob(
        job_id=new_id(),
        node_id=NODE,
        deployment_id=DEPLOYMENT,
        accelerator_id=f"{NODE}-cpu0",
        load_id=new_id(),
        artifact_set_id="bench",
        capability="rag.embedding@1",
        artifact_root="minilm",
        manifest=manifest_of(root / "minilm"),
        max_batch_size=64,
    )
    await connection.client.jetstream().publish(
        subjects.job_subject(NODE, DEPLOYMENT, "load"),
        msgspec.json.encode(job),
        headers={"Nats-Msg-Id": job.job_id},
    )
    scope = subjects.aggregate_filter(subjects.Aggregate.ACCELERATOR, job.accelerator_id)
    async for record in subscribe(connection.client, filter_subject=scope):
        event = record.event
        if isinstance(event, s.ResidencyLoaded | s.ResidencyLoadFailed) and event.load_id == job.load_id:
            if isinstance(event, s.ResidencyLoadFailed):
                raise RuntimeError(f"load failed: {event.code} {event.detail}")
            return event
    raise RuntimeError("event subscription ended")


def line(name: str, result: Result, seconds: float) -> tuple[float, float]:
    count, latencies = result
    rate, p50 = count / seconds, statistics.median(latencies) if latencies else float("nan")
    print(f"  {name:<28} {rate:9.1f} seq/s   p50 {p50:8.2f} ms   ({count} sequences)")
    return rate, p50


async def main(home: Path, root: Path, seconds: float, callers_list: list[int]) -> None:
    server = start_nats(home)
    connection = await connect(server.url, "bench-agent")
    agent: subprocess.Popen[bytes] | None = None
    try:
        await provision(connection.client)
        agent = await start_agent(connection, server.url, root, home / "agent.log")
        loaded = await load(connection, root)
        print(
            f"MiniLM loaded by the agent: {loaded.measured_bytes >> 20} MiB, cold load {loaded.cold_load_ms:.0f} ms"
        )
        adapter = EmbeddingAdapter.from_model_dir(root / "minilm")
        runtime = OnnxRuntimeCpu()
        runtime.load(root / "minilm" / "model.onnx", RuntimeOptions())
        run_rows(adapter, runtime, TEXTS[:8])  # warm-up
        await through_agent(connection, 8, 1.0)  # warm-up
        print(f"{os.cpu_count()} CPUs; {seconds:.0f} s per cell; one text per request")
        for callers in callers_list:
            print(f"{callers} concurrent caller(s):")
            a_rate, a_p50 = line(
                "(a) direct ONNX Runtime",
                await asyncio.to_thread(direct, adapter, runtime, callers, seconds),
                seconds,
            )
            outside: list[float] = []
            b_rate, b_p50 = line(
                "(b) agent invoke + batching",
                await through_agent(connection, callers, seconds, outside),
                seconds,
            )
            print(f"  ratio (b)/(a): throughput {b_rate / a_rate:.2f}, p50 {b_p50 / a_p50:.2f}")
            print(f"  (b) outside the model server: p50 {statistics.median(outside):.3f} ms a request")
        runtime.unload()
    finally:
        if agent is not None:
            agent.send_signal(signal.SIGTERM)
            agent.wait(30)
        await connection.close()
        stop_pid(server.pid)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--callers", type=int, nargs="+", default=[1, 8, 64])
    args = parser.parse_args()
    home, root = minilm_home("mf-bench-agent-")
    asyncio.run(main(home, root, args.seconds, args.callers))
    # On the event loop the agent runs (uvloop), with the agent of (b) gone.
    uvloop.run(worker_hop(root, manifest_of(root / "minilm"), args.seconds))
