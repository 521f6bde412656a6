"""Side by side: our /v1/embeddings against a peer's, and against onnxruntime direct (issue 20).

Three workloads, each a closed loop of clients, every one sending `input: [N sentences]`:
(a) 1 client x 1 sentence, (b) 64 clients x 1, (c) 8 clients x 32. Every endpoint named with
`--endpoint NAME=URL` (any OpenAI-compatible embeddings route; `--key NAME=KEY` sends a bearer
key) and, unless `--no-direct`, MiniLM in onnxruntime in-process (batches of 1, 64 and 32: the
engine's ceiling for each workload) are measured in turn, interleaved rep by rep (rep 1 of every
system, then rep 2, ...), so that a machine whose speed drifts weighs on all alike. Bring up one
server at a time if they share the machine's cores, and pass its processes with `--cpu` to share
out their CPU per request (from /proc, over each measurement). The load generator and the direct
engine run as child processes of this script, so neither takes the other's cores.

    .venv/bin/python -m bench.peer --endpoint ours=http://127.0.0.1:8080/v1/embeddings --key ours=mf_... \\
        --cpu ours:gateway=PID --cpu ours:agent=PID+ --cpu ours:nats=PID [--reps 3] [--seconds 10]

or, for a fresh embedded stack of ours started and stopped around the measurement (`bench.embedded`),
    .venv/bin/python -m bench.peer --up [--reps 3] [--seconds 10]

`--cpu ENDPOINT:GROUP=PID[,PID...]`: a trailing `+` on a pid adds its descendants. The table gives
the median over reps of sentences/s, p50 and p99, each endpoint's rate over the first's and over
direct's, and each group's CPU ms per request (mean over reps) with its VmRSS at the end. For
direct it gives the engine's own CPU (its process, threads included) for a request's sentences:
what a server spends beyond the engine is its total less that.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp

from bench.gateway import output_of, percentile

if TYPE_CHECKING:
    from nodeagent.adapters.embedding import EmbeddingResult

WORKLOADS = {"a": (1, 1), "b": (64, 1), "c": (8, 32)}  # clients, sentences per request
DIRECT_BATCH = {"a": 1, "b": 64, "c": 32}  # the engine's ceiling for each workload
DIRECT = "direct"
_WORDS = (
    ["the engineer", "a small dog", "my neighbour", "the committee", "the old fisherman", "the pilot"],
    ["quickly finished", "carefully read", "slowly painted", "quietly repaired", "calmly reviewed"],
    ["the quarterly report", "a wooden fence", "the broken bicycle", "an old letter", "the garden plan"],
    ["before lunch", "in the rain", "after the meeting", "near the river", "at the station", ""],
)


def sentences(count: int = 4096, seed: int = 1234) -> list[str]:
    """Short distinct-ish sentences (8-12 words, seeded): every system gets the same ones."""
    rnd = random.Random(seed)
    out = []
    for _ in range(count):
        text = " ".join(part for part in (rnd.choice(words) for words in _WORDS) if part)
        out.append(text[0].upper() + text[1:] + ".")
    return out


# ---- children: the load generator and the direct engine ----------------------------------------


async def http_child(
    url: str, key: str, model: str, clients: int, per_request: int, seconds: float, encoding: str = ""
) -> dict[str, Any]:
    """Closed-loop clients; what they saw over `seconds` (after one checked call each). `encoding`:
    the calls' `encoding_format` ("": left out, float)."""
    extra = {"encoding_format": encoding} if encoding else {}
    pool, headers = sentences(), {"content-type": "application/json"}
    if key:
        headers["authorization"] = f"Bearer {key}"
    latencies: list[float] = []
    errors: dict[str, int] = {}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=clients)) as session:

        async def call(batch: list[str]) -> tuple[int, bytes]:
            body = {"model": model, "input": batch, **extra}
            async with session.post(url, json=body, headers=headers) as response:
                return response.status, await response.read()

        status, body = await call(pool[:per_request])
        if status != 200 or len(json.loads(body)["data"]) != per_request:
            raise SystemExit(f"{url} answered {status}: {body[:300]!r}")
        end = time.perf_counter() + seconds

        async def client(offset: int) -> None:
            index = offset
            while (started := time.perf_counter()) < end:
                batch = [pool[(index + i) % len(pool)] for i in range(per_request)]
                index += per_request * clients
                status, _ = await call(batch)
                if status == 200:
                    latencies.append((time.perf_counter() - started) * 1000)
                else:
                    errors[str(status)] = errors.get(str(status), 0) + 1

        began, cpu_began = time.perf_counter(), time.process_time()
        await asyncio.gather(*(client(n * per_request) for n in range(clients)))
        elapsed, cpu_s = time.perf_counter() - began, time.process_time() - cpu_began
    # The load generator's own CPU: it shares the machine's cores with the system it measures.
    return {
        **summary(latencies, per_request, elapsed, errors),
        "client_cpu_ms": cpu_s * 1000 / max(1, len(latencies)),
    }


def minilm_engine(model_dir: str, threads: int = 0) -> Callable[[Sequence[str]], list[EmbeddingResult]]:
    """MiniLM in onnxruntime in this process (`threads` 0: every usable core): texts in, each
    text's result out."""
    from nodeagent.adapters.base import run_rows
    from nodeagent.adapters.embedding import EmbeddingAdapter
    from nodeagent.runtimes.base import RuntimeOptions
    from nodeagent.runtimes.onnx import OnnxRuntimeCpu
    from nodeagent.settings import usable_cores

    adapter, runtime = EmbeddingAdapter.from_model_dir(Path(model_dir)), OnnxRuntimeCpu()
    runtime.load(Path(model_dir) / "model.onnx", RuntimeOptions(intra_op_threads=threads or usable_cores()))
    return lambda texts: run_rows(adapter, runtime, texts)


def direct_child(model_dir: str, threads: int, batch: int, seconds: float) -> dict[str, Any]:
    """MiniLM in onnxruntime in this process, batches of `batch` back to back."""
    run = minilm_engine(model_dir, threads)
    pool, latencies, index = sentences(), [], 0
    run(pool[:batch])  # warm-up
    began, cpu_began = time.perf_counter(), time.process_time()
    while time.perf_counter() - began < seconds:
        rows = [pool[(index + i) % len(pool)] for i in range(batch)]
        index += batch
        started = time.perf_counter()
        run(rows)
        latencies.append((time.perf_counter() - started) * 1000)
    elapsed, cpu_s = time.perf_counter() - began, time.process_time() - cpu_began
    # The engine's own CPU (its threads included), a sentence: what a server's CPU is beyond it.
    sentence_ms = cpu_s * 1000 / max(1, len(latencies) * batch)
    return {**summary(latencies, batch, elapsed, {}), "engine_cpu_ms_a_sentence": sentence_ms}


def summary(
    latencies: list[float], per_request: int, elapsed: float, errors: dict[str, int]
) -> dict[str, Any]:
    enough = len(latencies) > 1
    return {
        "requests": len(latencies),
        "sent_per_s": len(latencies) * per_request / elapsed,
        "p50_ms": percentile(latencies, 50) if enough else float("nan"),
        "p99_ms": percentile(latencies, 99) if enough else float("nan"),
        "errors": errors,
    }


async def run_child(*spec: Any) -> dict[str, Any]:
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.peer", "--child", json.dumps(spec), stdout=asyncio.subprocess.PIPE
    )
    result: dict[str, Any] = json.loads(await output_of(child))
    return result


# ---- CPU and memory of the systems' processes, from /proc --------------------------------------


def pids_of(spec: str) -> list[int]:
    """`PID[,PID...]`, a trailing `+` adding the pid's descendants (one scan of /proc)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parents[int(entry)] = int(
                    Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1]
                )
            except (OSError, ValueError, IndexError):
                continue
    out: set[int] = set()
    for item in filter(None, spec.split(",")):
        root = int(item.rstrip("+"))
        out.add(root)
        frontier = [root] if item.endswith("+") else []
        while frontier:
            parent = frontier.pop()
            children = [pid for pid, of in parents.items() if of == parent and pid not in out]
            out.update(children)
            frontier.extend(children)
    return sorted(out)


def cpu_s(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def memory_mib(pids: list[int], field: str = "VmRSS:", file: str = "status") -> float:
    """A /proc memory figure summed over `pids`: VmRSS (status) counts shared pages once per
    process that touched them, so a group of many processes sharing memory (PostgreSQL's buffers)
    is overstated; Pss (smaps_rollup) splits each shared page among its sharers."""
    total = 0
    for pid in pids:
        try:
            lines = Path(f"/proc/{pid}/{file}").read_text().splitlines()
        except OSError:
            continue
        total += sum(int(line.split()[1]) for line in lines if line.startswith(field))
    return total / 1024


def group_cpu(groups: dict[str, str]) -> dict[str, float]:
    return {name: sum(cpu_s(pid) for pid in pids_of(spec)) for name, spec in groups.items()}


# ---- the run -----------------------------------------------------------------------------------


def pairs(items: list[str], what: str) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"{what} {item!r}: expected NAME=VALUE")
        out[name] = value
    return out


async def measure(args: argparse.Namespace) -> None:
    endpoints, keys, models = (
        pairs(args.endpoint, "--endpoint"),
        pairs(args.key, "--key"),
        pairs(args.model_for, "--model-for"),
    )
    cpu_groups: dict[str, dict[str, str]] = {}
    for system_group, spec in pairs(args.cpu, "--cpu").items():
        system, _, group = system_group.partition(":")
        cpu_groups.setdefault(system, {})[group or system] = spec
    systems = [*endpoints, *([] if args.no_direct else [DIRECT])]
    model_dir = args.model_dir
    if DIRECT in systems and not model_dir:
        from nodeagent.models.pull import pull_minilm

        model_dir = str(
            pull_minilm(Path(tempfile.mkdtemp(prefix="mf-peer-")) / "minilm", install_missing=False)
        )
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start; {args.reps} reps x "
          f"{args.seconds:g} s per system and workload, interleaved; systems: {', '.join(systems)}")  # fmt: skip
    results: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for rep in range(args.reps):
        for workload in args.workloads:
            clients, per_request = WORKLOADS[workload]
            for system in systems:
                groups = cpu_groups.get(system, {})
                before = group_cpu(groups)
                if system == DIRECT:
                    batch = DIRECT_BATCH[workload]
                    result = await run_child("direct", model_dir, args.threads, batch, args.seconds)
                else:
                    model = models.get(system, args.model)
                    spec = (
                        endpoints[system],
                        keys.get(system, ""),
                        model,
                        clients,
                        per_request,
                        args.seconds,
                        args.encoding_format or "",
                    )
                    result = await run_child("http", *spec)
                after = group_cpu(groups)
                result["cpu_ms"] = {
                    g: (after[g] - before[g]) * 1000 / max(1, result["requests"]) for g in groups
                }
                results.setdefault((workload, system), []).append(result)
                print(f"  rep {rep + 1} ({workload}) {system}: {result['sent_per_s']:.1f} sent/s, "
                      f"p50 {result['p50_ms']:.1f} ms, p99 {result['p99_ms']:.1f} ms, errors {result['errors'] or 'none'}",
                      flush=True)  # fmt: skip
    report(args.workloads, systems, results, cpu_groups)


def report(
    workloads: list[str],
    systems: list[str],
    results: dict[tuple[str, str], list[dict[str, Any]]],
    cpu_groups: dict[str, dict[str, str]],
) -> None:
    def median(workload: str, system: str, field: str) -> float:
        return statistics.median(r[field] for r in results[(workload, system)])

    first = systems[0]
    for workload in workloads:
        clients, per_request = WORKLOADS[workload]
        print(f"\n({workload}) {clients} client(s) x {per_request} sentence(s); medians over reps")
        print(
            f"{'system':<12}{'sent/s':>9}{'p50 ms':>9}{'p99 ms':>9}{'÷ ' + first:>11}{'÷ direct':>10}  CPU ms/request (mean)"
        )
        for system in systems:
            rate = median(workload, system, "sent_per_s")
            over_first = rate / median(workload, first, "sent_per_s")
            over_direct = rate / median(workload, DIRECT, "sent_per_s") if DIRECT in systems else float("nan")
            cpu = {
                g: statistics.fmean(r["cpu_ms"][g] for r in results[(workload, system)])
                for g in cpu_groups.get(system, {})
            }
            shown = ", ".join(f"{g} {v:.2f}" for g, v in cpu.items()) + (
                f"; total {sum(cpu.values()):.2f}" if cpu else ""
            )
            if system != DIRECT:
                client = statistics.fmean(r["client_cpu_ms"] for r in results[(workload, system)])
                shown += f"{'; ' if shown else ''}load generator {client:.2f}"
            else:
                sentence = statistics.fmean(
                    r["engine_cpu_ms_a_sentence"] for r in results[(workload, system)]
                )
                shown += f"{'; ' if shown else ''}engine alone {sentence * per_request:.2f}"
            print(f"{system:<12}{rate:>9.1f}{median(workload, system, 'p50_ms'):>9.1f}{median(workload, system, 'p99_ms'):>9.1f}"
                  f"{over_first:>11.2f}{over_direct:>10.2f}  {shown}")  # fmt: skip
    for system, groups in cpu_groups.items():
        for name, field, file in (("VmRSS", "VmRSS:", "status"), ("Pss", "Pss:", "smaps_rollup")):
            figures = {g: memory_mib(pids_of(spec), field, file) for g, spec in groups.items()}
            shown = ", ".join(f"{g} {v:.0f}" for g, v in figures.items())
            print(f"{name} at the end, MiB, {system}: {shown}; total {sum(figures.values()):.0f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--endpoint", action="append", default=[], help="NAME=URL of an embeddings route")
    parser.add_argument("--key", action="append", default=[], help="NAME=KEY: a bearer key for that endpoint")
    parser.add_argument("--model", default="all-MiniLM-L6-v2", help="the request's `model`")
    parser.add_argument("--model-for", action="append", default=[], help="NAME=MODEL for one endpoint")
    parser.add_argument("--cpu", action="append", default=[], help="ENDPOINT:GROUP=PID[,PID...][+]")
    parser.add_argument("--workloads", nargs="+", choices=sorted(WORKLOADS), default=sorted(WORKLOADS))
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--no-direct", action="store_true", help="leave onnxruntime direct out")
    parser.add_argument(
        "--encoding-format",
        choices=["float", "base64"],
        help="the calls' encoding_format (default: left out)",
    )
    parser.add_argument("--model-dir", help="MiniLM for direct (default: pulled as the stack does)")
    parser.add_argument(
        "--threads", type=int, default=0, help="direct's ONNX Runtime threads (0: every usable core)"
    )
    parser.add_argument(
        "--up",
        action="store_true",
        help="measure a fresh embedded stack as `ours` (`modelforge up` in a home of its own, a key, "
        "CPU per process), stopped after",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, *spec = json.loads(args.child)
        out = asyncio.run(http_child(*spec)) if kind == "http" else direct_child(*spec)
        print(json.dumps(out))
    elif not args.endpoint and args.no_direct and not args.up:
        parser.error("nothing to measure: name an --endpoint, or --up, or leave direct in")
    elif args.up:
        from bench.embedded import embedded_stack

        with embedded_stack() as stack:
            args.endpoint.insert(0, f"ours={stack.url}")
            args.key.append(f"ours={stack.key}")
            args.cpu += [f"ours:{group}={spec}" for group, spec in stack.cpu.items()]
            asyncio.run(measure(args))
    else:
        asyncio.run(measure(args))
