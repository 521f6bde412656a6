"""`modelforge gateway`: the HTTP edge and command side as one process."""

from __future__ import annotations

import argparse
import gc
import logging
import os
import socket

import uvicorn
import uvloop

from gateway.http.server import server_config
from gateway.https import HttpsSettingsInvalid, https_options
from gateway.process import start_replica
from streams import tracing
from streams.subjects import token

log = logging.getLogger("modelforge.gateway")
# Python's cyclic collector runs its young generation every 700 container allocations: under load,
# every few requests, each time traversing every request in flight (an embedding's list of floats
# included) and promoting them, which makes the full collections that follow grow with traffic: a
# quarter of the gateway's CPU at 64 concurrent callers. At 20,000 it runs ~30 times less often,
# and what start-up built (the live view, the catalogue, the modules) is frozen out of every one.
GC_YOUNG_THRESHOLD = 20_000


def tune_collector() -> None:
    """Freeze what exists now out of the cyclic collector's passes, and run its young generation
    every GC_YOUNG_THRESHOLD allocations (the older generations' ratios stay Python's)."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)


async def run_gateway(host: str, port: int, gateway_id: str, https: dict[str, str]) -> None:
    replica = await start_replica(gateway_id)
    tune_collector()
    server = uvicorn.Server(server_config(replica.app, host=host, port=port, log_level="warning", **https))
    log.info("gateway %s listening on %s://%s:%d", gateway_id, "https" if https else "http", host, port)
    try:
        await server.serve()
    finally:
        await replica.close()


def _cmd_gateway(args: argparse.Namespace) -> int:
    try:
        https = https_options()
    except HttpsSettingsInvalid as bad:
        log.error("%s", bad)
        return 2
    tracing.install("modelforge-gateway")
    uvloop.run(run_gateway(args.host, args.port, token(args.gateway_id, "gateway id"), https))
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("gateway", help="run the HTTP gateway")
    parser.add_argument("--host", default=os.environ.get("MODELFORGE_HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("MODELFORGE_PORT", "8080")))
    default_id = (
        os.environ.get("MODELFORGE_GATEWAY_ID") or socket.gethostname().split(".")[0] + f"-{os.getpid()}"
    )
    parser.add_argument(
        "--gateway-id", default="".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in default_id)
    )
    parser.set_defaults(handler=_cmd_gateway)
