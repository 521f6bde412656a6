"""`POST /v1/embeddings` through a `modelforge gateway` subprocess vs direct ONNX Runtime calls.

Starts its own stack in a temporary folder: nats-server (from the wheel), a `modelforge agent`
subprocess, MiniLM registered + probed + promoted, a client key with high limits and a
`modelforge gateway` subprocess. HTTP load comes from another process: `wrk` when it is on PATH
(else an aiohttp client run as a child of this script). Measures, on one short input:

(1) direct engine call (preprocess, ONNX Runtime, pool) p50/p99 vs a warm sequential HTTP call
    p50/p99; target: HTTP p50 − direct p50 ≤ 1.5 ms;
(2) saturated throughput: gateway requests/s at N connections vs direct sequences/s with batches of
    the agent's batch size; target ≥ 0.9;
(3) one placement decision with 32 residents (bench/placement.py); target ≤ 50 µs;
and where the gateway's time goes: the mean of each `latency` stage of a sample of responses, and
the CPU each process spent per request.

    .venv/bin/python -m bench.gateway [--seconds 8] [--connections 32 64] [--loadgen auto|wrk|aiohttp]
                                      [--only latency]   (skip (2) and (3): quick iterations on (1))
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import io
import json
import os
import re
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import aiohttp
import msgspec

from bench import rawlimits
from eventstore.connection import connect
from eventstore.provision import provision
from eventstore.store import EventStore
from gateway.clients.service import ClientService
from modelforge.devstack.nats_server import start_nats
from modelforge.devstack.processes import stop_pid
from nodeagent.adapters.base import run_rows
from nodeagent.adapters.embedding import EmbeddingAdapter
from nodeagent.models.pull import pull_minilm
from nodeagent.runtimes.base import RuntimeOptions
from nodeagent.runtimes.onnx import OnnxRuntimeCpu
from nodeagent.settings import CPU_THREADS_ENV, DEFAULT_CPU_THREADS, usable_cores

REPO = Path(__file__).resolve().parents[1]
TEXT = "A cat sits on the mat."
EMBEDDINGS = "/v1/embeddings"
BODY = json.dumps({"input": TEXT, "model": "all-MiniLM-L6-v2"})
LATENCY_TARGET_MS, THROUGHPUT_TARGET, PLACEMENT_TARGET_US = 1.5, 0.9, 50.0
STOP = threading.Event()  # ends the direct-engine loops (on their threads) when we are interrupted
BATCH = 32  # the agent's batch (LoadJob.max_batch_size / DeploymentState.max_batch_size default)
WRK_LUA = """wrk.method = "POST"
wrk.body = [[{body}]]
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer {key}"
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('\\nWRK-JSON {{"requests":%d,"duration_us":%d,"p50_us":%d,"p99_us":%d,'
    .. '"bad_status":%d,"socket_errors":%d}}\\n', summary.requests, summary.duration,
    latency:percentile(50), latency:percentile(99), e.status, e.connect + e.read + e.write + e.timeout))
end
"""


# ---- the aiohttp load generator (runs as a child process of this script) ----------------------


async def aiohttp_load(
    url: str, key: str, connections: int, seconds: float, path: str = EMBEDDINGS
) -> dict[str, Any]:
    """Closed-loop clients; percentiles of what they saw, the mean of each server `latency` stage
    (embeddings only; any other path is a plain GET) and this process's CPU per request."""
    headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
    cpu_started = time.process_time()
    latencies: list[float] = []
    stages: dict[str, float] = {}
    bad: dict[int, int] = {}  # status -> count
    end = time.perf_counter() + seconds
    connector = aiohttp.TCPConnector(limit=connections)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def caller() -> None:
            while time.perf_counter() < end:
                started = time.perf_counter()
                call = (
                    session.post(f"{url}{path}", data=BODY, headers=headers)
                    if path == EMBEDDINGS
                    else session.get(f"{url}{path}")
                )
                async with call as response:
                    body = await response.read()
                elapsed = (time.perf_counter() - started) * 1000
                if response.status != 200:
                    bad[response.status] = bad.get(response.status, 0) + 1
                    continue
                latencies.append(elapsed)
                if path != EMBEDDINGS:
                    continue
                latency = msgspec.json.decode(body)["latency"]
                latency["client_minus_server_ms"] = elapsed - latency["total_ms"]
                for name, value in latency.items():
                    stages[name] = stages.get(name, 0.0) + value

        await asyncio.gather(*(caller() for _ in range(connections)))
    n = max(1, len(latencies))
    cuts = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else [float("nan")] * 99
    return {
        "requests": len(latencies),
        "seconds": seconds,
        "p50_ms": cuts[49],
        "p99_ms": cuts[98],
        "errors": f"non-200: {bad or 'none'}",
        "stages": {k: v / n for k, v in stages.items()},
        "loadgen_cpu_ms": (time.process_time() - cpu_started) * 1000 / n,
    }


async def output_of(child: asyncio.subprocess.Process) -> bytes:
    """The child's stdout once it exits; killed if we are interrupted first."""
    try:
        out, _ = await child.communicate()
    except BaseException:
        if child.returncode is None:
            child.kill()
            await child.wait()
        raise
    return out


async def run_aiohttp_child(
    url: str, key: str, connections: int, seconds: float, path: str = EMBEDDINGS
) -> dict[str, Any]:
    spec = json.dumps([url, key, connections, seconds, path])
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.gateway", "--child", spec, stdout=asyncio.subprocess.PIPE
    )
    result: dict[str, Any] = json.loads(await output_of(child))
    return result


def write_wrk_script(path: Path, key: str) -> Path:
    path.write_text(WRK_LUA.format(body=BODY, key=key))
    return path


async def run_wrk(url: str, connections: int, seconds: float, lua: Path) -> dict[str, Any]:
    wrk = await asyncio.create_subprocess_exec(
        "wrk", "-t1", f"-c{connections}", f"-d{seconds:g}s", "--timeout", "10s", "-s", str(lua),
        f"{url}/v1/embeddings", stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out = await output_of(wrk)
    found = re.search(r"WRK-JSON (\{.*\})", out.decode())
    if found is None:
        raise RuntimeError(f"wrk printed no result:\n{out.decode()}")
    raw = json.loads(found.group(1))
    return {
        "requests": raw["requests"] - raw["bad_status"],
        "seconds": raw["duration_us"] / 1e6,
        "p50_ms": raw["p50_us"] / 1000,
        "p99_ms": raw["p99_us"] / 1000,
        "errors": f"{raw['bad_status']} non-200, {raw['socket_errors']} socket errors",
        "stages": {},
    }


# ---- measurements in this process -------------------------------------------------------------


def direct_latency(adapter: EmbeddingAdapter, runtime: OnnxRuntimeCpu, seconds: float) -> list[float]:
    out, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end and not STOP.is_set():
        started = time.perf_counter()
        run_rows(adapter, runtime, [TEXT])
        out.append((time.perf_counter() - started) * 1000)
    return out


def direct_batched_rate(
    adapter: EmbeddingAdapter, runtime: OnnxRuntimeCpu, seconds: float
) -> tuple[float, float]:
    """(sequences/s, CPU ms per sequence: every engine thread's, from this otherwise idle process)."""
    rows, batches, started, cpu = [TEXT] * BATCH, 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - started < seconds and not STOP.is_set():
        run_rows(adapter, runtime, rows)
        batches += 1
    sequences = batches * BATCH
    return sequences / (time.perf_counter() - started), (time.process_time() - cpu) * 1000 / sequences


def cpu_seconds(pids: dict[str, int]) -> dict[str, float]:
    """utime + stime of each process (Linux /proc), to share out a run's CPU per request."""
    out = {}
    for name, pid in pids.items():
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            out[name] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


def placement_lines(iterations: int) -> list[str]:
    """bench/placement.py's own measurement, its printed lines captured."""
    placement = importlib.import_module("bench.placement")
    argv, sys.argv = sys.argv, ["placement.py", str(iterations)]
    buffer = io.StringIO()
    try:
        with contextlib.redirect_stdout(buffer):
            placement.main()
    finally:
        sys.argv = argv
    return buffer.getvalue().splitlines()


def percentile(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100)[q - 1]


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


# ---- the run ----------------------------------------------------------------------------------


async def main(args: argparse.Namespace) -> None:
    agents = importlib.import_module("tests.support.agents")
    serving = importlib.import_module("tests.support.serving")
    use_wrk = args.loadgen == "wrk" or (args.loadgen == "auto" and shutil.which("wrk") is not None)
    # The targets compare against the engine as the agent runs it (its ONNX Runtime threads); the
    # engine on every core is measured beside it, so what the thread setting costs shows too.
    agent_threads = int(os.environ.get(CPU_THREADS_ENV) or DEFAULT_CPU_THREADS)
    all_cores = usable_cores()
    thread_counts = list(dict.fromkeys([agent_threads, all_cores]))
    print(f"{all_cores} CPUs, load average {load_average()} at start; load generator: "
          f"{'wrk (C, 1 thread)' if use_wrk else 'aiohttp child process'}; ONNX Runtime threads: "
          f"agent {agent_threads}, direct engine {' and '.join(map(str, thread_counts))} (all cores: {all_cores})")  # fmt: skip
    rows: list[tuple[str, str, str]] = []
    latency_only = args.only == "latency"
    for line in [] if latency_only else placement_lines(args.placement_iterations):
        print(f"  placement: {line}")
        if found := re.match(r"worst case ([\d.]+) µs", line):
            worst = float(found.group(1))
            rows.append(("placement, 32 residents (worst, cpu)", f"{worst:.2f} µs",
                         f"{worst / PLACEMENT_TARGET_US:.2f} of ≤ {PLACEMENT_TARGET_US:.0f} µs"))  # fmt: skip

    home = Path(tempfile.mkdtemp(prefix="mf-bench-gateway-"))
    os.chmod(home, 0o755)
    root = home / "artifacts"
    pull_minilm(root / agents.MINILM, install_missing=False)
    server = start_nats(home)
    connection = await connect(server.url, "bench-gateway")
    agent = agents.AgentProcess(server.url, "bench-node", root, home)
    gateway = serving.GatewayProcess(server.url, home)
    engines = {threads: OnnxRuntimeCpu() for threads in thread_counts}
    try:
        await provision(connection.client)
        store = EventStore(connection)
        await agent.start(connection)
        artifacts = await serving.register_artifacts(store, agent.node, root, agents.MINILM)
        measured = await serving.probe(connection, agent.node, artifacts, root)
        await serving.promote(store, artifacts, measured)
        key = await ClientService(store).create(
            "bench-gateway", ["rag.embedding@1"], requests_per_minute=10_000_000, max_concurrency=1024
        )
        url = await gateway.start()
        headers = {"authorization": f"Bearer {key.key}", "content-type": "application/json"}
        async with (  # the first call loads MiniLM (cold)
            aiohttp.ClientSession() as session,
            session.post(f"{url}/v1/embeddings", data=BODY, headers=headers) as first,
        ):
            cold = await first.json()
        lua = write_wrk_script(home / "post.lua", key.key)
        assert gateway.process is not None
        assert agent.process is not None
        pids = {"gateway": gateway.process.pid, "agent": agent.process.pid, "nats": server.pid}
        print(f"stack up in {home}; first (cold) call {first.status}, {cold['latency']['total_ms']:.0f} ms; "
              f"pids {pids} (for py-spy)", flush=True)  # fmt: skip

        async def load(connections: int, seconds: float) -> dict[str, Any]:
            if use_wrk:
                return await run_wrk(url, connections, seconds, lua)
            return await run_aiohttp_child(url, key.key, connections, seconds)

        async def measured_load(connections: int, seconds: float) -> tuple[dict[str, Any], dict[str, float]]:
            before = cpu_seconds(pids)
            result = await load(connections, seconds)
            after = cpu_seconds(pids)
            per_request = {k: (after[k] - before[k]) * 1000 / max(1, result["requests"]) for k in after}
            if "loadgen_cpu_ms" in result:
                per_request["loadgen"] = result["loadgen_cpu_ms"]
            return result, per_request

        adapter = EmbeddingAdapter.from_model_dir(root / agents.MINILM)
        for threads, runtime in engines.items():
            runtime.load(root / agents.MINILM / "model.onnx", RuntimeOptions(intra_op_threads=threads))
            run_rows(adapter, runtime, [TEXT] * BATCH)  # warm-up
        await load(1, args.warmup)
        if not latency_only:
            await load(max(args.connections), args.warmup)

        # (0) the raw limits, sequential: NATS request–reply, JetStream acked publish, HTTP GET /healthz
        raw_seconds = max(1.0, args.seconds / 3)
        rtt = rawlimits.p50(await rawlimits.nats_round_trips(server.url, raw_seconds))
        acked = rawlimits.p50(await rawlimits.acked_publishes(server.url, raw_seconds))
        floor = (await run_aiohttp_child(url, key.key, 1, raw_seconds, "/healthz"))["p50_ms"]
        rows += [
            ("raw NATS request–reply, p50", f"{rtt:.3f} ms", "requester and responder in this process"),
            ("raw JetStream acked publish, p50", f"{acked:.3f} ms", "file storage, as the event streams"),
            ("raw HTTP GET /healthz, p50", f"{floor:.3f} ms", "the same client and server, nothing behind"),
        ]

        # (1) one short input, sequential: direct engine vs a warm HTTP call
        direct = {
            t: await asyncio.to_thread(direct_latency, adapter, r, args.seconds) for t, r in engines.items()
        }
        for threads, calls in direct.items():
            rows.append((f"direct engine, {threads} thread(s), 1 input: p50 / p99",
                         f"{percentile(calls, 50):.3f} / {percentile(calls, 99):.3f} ms", f"{len(calls)} calls"))  # fmt: skip
        http, cpu1 = await measured_load(1, args.seconds)
        overhead = http["p50_ms"] - percentile(direct[agent_threads], 50)
        rows += [
            ("gateway HTTP, 1 conn: p50 / p99", f"{http['p50_ms']:.3f} / {http['p99_ms']:.3f} ms",
             f"{http['requests']} calls, {http['errors']}"),
            (f"  p50 difference (gateway − direct, {agent_threads} thread(s))", f"{overhead:.3f} ms",
             f"{overhead / LATENCY_TARGET_MS:.2f} of ≤ {LATENCY_TARGET_MS} ms; "
             f"= {overhead / rtt:.1f} NATS round trips, {(overhead - floor) / rtt:.1f} beyond the HTTP floor"),
        ]  # fmt: skip
        if all_cores != agent_threads:
            against_all = http["p50_ms"] - percentile(direct[all_cores], 50)
            rows.append((f"  p50 difference (gateway − direct, {all_cores} threads)", f"{against_all:.3f} ms",
                         "the agent's thread setting included"))  # fmt: skip

        # (2) saturated throughput: gateway at N connections vs direct batches of BATCH rows
        cpu_by_connections = {1: cpu1}
        rates: dict[int, tuple[float, float]] = {}  # threads: (sequences/s, CPU ms per sequence)
        for threads, runtime in [] if latency_only else engines.items():
            rates[threads] = await asyncio.to_thread(direct_batched_rate, adapter, runtime, args.seconds)
            rows.append((f"direct engine, {threads} thread(s), batches of {BATCH}", f"{rates[threads][0]:.1f} seq/s",
                         f"{rates[threads][1]:.3f} CPU ms per sequence"))  # fmt: skip
        for runtime in engines.values():
            runtime.unload()
        rate, engine_cpu = rates.get(agent_threads, (0.0, 0.0))
        best = max((r for r, _ in rates.values()), default=0.0)
        for connections in [] if latency_only else args.connections:
            result, cpu_by_connections[connections] = await measured_load(connections, args.seconds)
            gw_rate = result["requests"] / result["seconds"]
            rows.append((f"gateway HTTP, {connections} conns", f"{gw_rate:.1f} req/s",
                         f"{gw_rate / rate:.2f} of ≥ {THROUGHPUT_TARGET}; {gw_rate / best:.2f} of the faster "
                         f"engine (p50 {result['p50_ms']:.1f} ms, {result['errors']})"))  # fmt: skip

        # where the time goes: server `latency` stages of a sample, sequential and saturated
        samples = {
            c: await run_aiohttp_child(url, key.key, c, args.sample_seconds)
            for c in ((1,) if latency_only else (1, max(args.connections)))
        }
        width = max(len(r[0]) for r in rows) + 2
        print(f"\nload average {load_average()} at end; {args.seconds:g} s per measurement\n")
        print(f"{'measurement':<{width}} {'result':<22} ratio to target / notes")
        for name, value, note in rows:
            print(f"{name:<{width}} {value:<22} {note}")
        print(f"\nmean server `latency` stage (ms) over aiohttp samples of {args.sample_seconds:g} s")
        print(f"  {'stage':<26}" + "".join(f"{f'{c} conn':>12}" for c in samples))
        for stage in next(iter(samples.values()))["stages"]:
            print(
                f"  {stage:<26}" + "".join(f"{s['stages'].get(stage, 0.0):12.3f}" for s in samples.values())
            )
        print(f"  {'(client p50 seen)':<26}" + "".join(f"{s['p50_ms']:12.3f}" for s in samples.values()))
        print("\nCPU ms per request (from /proc, during the load runs above)")
        print(f"  {'process':<10}" + "".join(f"{f'{c} conn':>10}" for c in cpu_by_connections))
        for name in [*pids, "loadgen"]:
            print(
                f"  {name:<10}"
                + "".join(f"{cpu.get(name, 0.0):10.3f}" for cpu in cpu_by_connections.values())
            )
        totals = [sum(cpu.values()) for cpu in cpu_by_connections.values()]
        print(f"  {'all':<10}" + "".join(f"{total:10.3f}" for total in totals))
        cores = os.cpu_count() or 1
        busiest = totals[-1]
        if rate:
            print(f"  at {busiest:.3f} CPU ms per request, {cores} cores serve at most "
                  f"{cores * 1000 / busiest:.0f} req/s = {cores * 1000 / busiest / rate:.2f} of the direct "
                  f"engine's {rate:.0f} seq/s at {agent_threads} thread(s), whose own CPU is {engine_cpu:.3f} ms "
                  "per sequence")  # fmt: skip
    finally:
        STOP.set()
        gateway.stop()
        agent.stop()
        await connection.close()
        stop_pid(server.pid)
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))  # tests.support (the stack helpers) and bench.placement
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=8.0, help="each measurement")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--sample-seconds", type=float, default=4.0, help="each latency-breakdown sample")
    parser.add_argument("--connections", type=int, nargs="+", default=[32, 64])
    parser.add_argument("--loadgen", choices=["auto", "wrk", "aiohttp"], default="auto")
    parser.add_argument("--placement-iterations", type=int, default=20_000)
    parser.add_argument("--only", choices=["latency"], help="measure the sequential call alone")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    # Clean up on Ctrl-C and SIGTERM, also where SIGINT came in ignored (a background job of a script).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    if args.child:
        print(json.dumps(asyncio.run(aiohttp_load(*json.loads(args.child)))))
    else:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(main(args))
