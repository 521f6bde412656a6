"""The gateway's CPU a request at one client, against the floor of the stack it is built on.

Issue 20 asks ≤ 0.8 ms of gateway CPU a request at every load; at one client (workload (a)) every
message, wake-up and task is that request's alone. This measures what the least gateway built on
the same parts spends on the same call: uvicorn with the gateway's HTTP protocol and uvloop,
starlette, and the gateway's NATS connection (`eventstore.connection`), its collector tuned as the
gateway's is. The floor reads the body, asks a responder in another process over core NATS (as the gateway asks
an agent), and answers the reply's bytes as they came: no key, limits, placement, lease,
validation, records, metrics or tracing. The responder runs the same engine on the ask's texts
(MiniLM in onnxruntime, in its own process, as `bench.peer`'s direct does), so the floor's requests
come as often as ours and share the cores with the same engine work between them: what the engine
does to the caches between two requests, it does to both. With `--no-engine` the responder answers
every ask at once with one vector it computed at start: the floor of an edge whose engine is not
on its cores (a GPU node's), requests back to back.

Both run at once and take the load in turn, `--seconds` each, alternating which goes first (as
`bench.ab` does), so each round's pair shares the machine's state of that moment; the summary is
the median of the rounds' ratios (ours ÷ floor) with a bootstrap 95 % interval.

    .venv/bin/python -m bench.edge_floor [--rounds 10] [--seconds 4] [--no-engine]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import socket
import statistics
import sys
import tempfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import msgspec
import numpy as np
import uvloop
from nats.aio.msg import Msg
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from bench.ab import interval
from bench.embedded import embedded_stack
from bench.peer import WORKLOADS, cpu_s, minilm_engine, pids_of, run_child

SUBJECT = "bench.floor.invoke"
TARGET_MS = 0.8  # issue 20: gateway CPU a request, at any load


def engine_answer(model_dir: str) -> Callable[[bytes], bytes]:
    """An OpenAI embeddings answer to an ask's texts, from MiniLM in onnxruntime in this process
    (as `bench.peer`'s direct runs it)."""
    from nodeagent.worker.capabilities import float32_rows

    run = minilm_engine(model_dir)

    def answer(ask: bytes) -> bytes:
        results = run(msgspec.json.decode(ask)["input"])
        rows = msgspec.json.decode(float32_rows(np.stack([r.vector for r in results])))
        data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(rows)]
        return msgspec.json.encode({"object": "list", "data": data, "model": "all-MiniLM-L6-v2"})

    return answer


async def respond(url: str, model_dir: str, engine: bool) -> None:
    """The agent's part: answer every ask with the engine's vectors for its texts (or, without
    `engine`, with the one vector computed at start)."""
    from eventstore.connection import connect

    connection, answer = await connect(url, "floor-responder"), engine_answer(model_dir)
    if not engine:
        fixed = answer(msgspec.json.encode({"input": ["A cat sits on the mat."]}))
        answer = lambda _ask: fixed  # noqa: E731

    async def reply(msg: Msg) -> None:
        await connection.client.publish(msg.reply, answer(msg.data))

    await connection.client.subscribe(SUBJECT, cb=reply)
    await connection.client.flush()
    print("ready", flush=True)
    await asyncio.Event().wait()


async def serve_floor(url: str) -> None:
    """The floor: body in, one NATS request-reply, its bytes out."""
    import uvicorn

    from eventstore.connection import connect
    from gateway.cli import tune_collector
    from gateway.http.server import server_config

    connection = await connect(url, "floor-edge")

    async def embeddings(request: Request) -> Response:
        reply = await connection.client.request(SUBJECT, await request.body(), timeout=5)
        return Response(reply.data, media_type="application/json")

    app = Starlette(routes=[Route("/v1/embeddings", embeddings, methods=["POST"])])
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    tune_collector()
    server = uvicorn.Server(server_config(app, log_level="warning"))
    print(f"ready {listening.getsockname()[1]}", flush=True)
    await server.serve(sockets=[listening])


@contextlib.asynccontextmanager
async def child(*args: str) -> AsyncIterator[tuple[int, str]]:
    """This module run as `args`, until its first line ("ready ..."): its pid and that line."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.edge_floor", *args, stdout=asyncio.subprocess.PIPE
    )
    try:
        assert process.stdout is not None
        line = (await asyncio.wait_for(process.stdout.readline(), 30)).decode().strip()
        if not line.startswith("ready"):
            raise RuntimeError(f"bench.edge_floor {' '.join(args)} did not start")
        yield process.pid, line
    finally:
        process.terminate()
        await process.wait()


async def compare(
    ours_url: str, ours_key: str, ours_gateway: int, rounds: int, seconds: float, engine: bool
) -> None:
    from modelforge.devstack.nats_server import start_nats
    from modelforge.devstack.processes import stop_pid
    from nodeagent.models.pull import pull_minilm

    scratch = Path(tempfile.mkdtemp(prefix="mf-floor-"))  # the model's files and the store
    model_dir = pull_minilm(scratch / "minilm", install_missing=False)
    nats = start_nats(scratch / "nats")
    try:
        responder = child(
            "--respond", nats.url, "--model-dir", str(model_dir), *([] if engine else ["--no-engine"])
        )
        async with responder, child("--serve", nats.url) as (floor_pid, line):
            floor_url = f"http://127.0.0.1:{line.split()[1]}/v1/embeddings"
            sides = {"ours": (ours_url, ours_key, ours_gateway), "floor": (floor_url, "", floor_pid)}
            clients, per_request = WORKLOADS["a"]
            measured: dict[str, list[float]] = {side: [] for side in sides}
            rates: dict[str, list[float]] = {side: [] for side in sides}
            for number in range(rounds):
                for side in list(sides) if number % 2 == 0 else list(sides)[::-1]:
                    url, key, pid = sides[side]
                    began = cpu_s(pid)
                    result = await run_child("http", url, key, "", clients, per_request, seconds, "")
                    measured[side].append((cpu_s(pid) - began) * 1000 / (result["requests"] + 1))
                    rates[side].append(result["sent_per_s"])
                print(
                    f"  round {number + 1}: gateway {measured['ours'][-1]:.3f}, "
                    f"floor {measured['floor'][-1]:.3f} ms a request",
                    flush=True,
                )
    finally:
        stop_pid(nats.pid)
        shutil.rmtree(scratch, ignore_errors=True)
    ratios = [o / f for o, f in zip(measured["ours"], measured["floor"], strict=True)]
    low, high = interval(ratios)
    floor = statistics.median(measured["floor"])
    print(f"\nCPU ms a request at (a), medians of {rounds} rounds of {seconds:g} s:")
    for side, name in (("ours", "our gateway"), ("floor", "the floor")):
        print(
            f"  {name:<12}{statistics.median(measured[side]):.3f} "
            f"({statistics.median(rates[side]):.1f} requests a second)"
        )
    print(f"  ours ÷ floor {statistics.median(ratios):.2f} (95 % interval {low:.2f} - {high:.2f})")
    print(f"  the {TARGET_MS} ms target ÷ floor {TARGET_MS / floor:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=4.0, help="each side's share of a round")
    parser.add_argument("--respond", metavar="NATS_URL", help=argparse.SUPPRESS)
    parser.add_argument("--serve", metavar="NATS_URL", help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)
    parser.add_argument(
        "--no-engine",
        action="store_true",
        help="the floor's responder answers at once (engine off the cores)",
    )
    args = parser.parse_args()
    if args.respond:
        uvloop.run(respond(args.respond, args.model_dir, not args.no_engine))
        return
    if args.serve:
        uvloop.run(serve_floor(args.serve))
        return
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start")
    with embedded_stack() as stack:
        (gateway,) = pids_of(stack.cpu["gateway"])
        asyncio.run(compare(stack.url, stack.key, gateway, args.rounds, args.seconds, not args.no_engine))


if __name__ == "__main__":
    main()
