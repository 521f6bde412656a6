"""`modelforge projector` and `modelforge replay`. DATABASE_URL and NATS_URL come from the environment."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from datetime import datetime
from typing import Any, NoReturn

import uvloop

from eventstore.connection import nats_url
from projections.migrate import LIVE_SCHEMA, MigrationChanged
from projections.projector import COMMIT_INTERVAL_S
from streams.subjects import EVENTS_STREAM, PROJECTED_STREAMS

log = logging.getLogger("modelforge.projector")


def database_url() -> str:
    url = os.environ.get("DATABASE_URL")
    if not url:
        raise SystemExit("DATABASE_URL is not set and no embedded stack is running (start one: ./dev up)")
    return url


def _supervise(args: argparse.Namespace) -> NoReturn:
    """The default: one worker process per stream, under a supervisor that replaces this process."""
    from projections import supervisor

    database_url()  # fail here, once, rather than in every worker
    worker_args = ["--schema", args.schema, "--batch-max", str(args.batch_max)]
    worker_args += ["--commit-interval-ms", str(args.commit_interval_ms)]
    supervisor.exec_supervisor(worker_args + ["--no-telemetry"] * args.no_telemetry)


async def _projector(args: argparse.Namespace) -> int:
    from projections import projector, supervisor

    streams = tuple(dict.fromkeys(args.stream))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    watch = asyncio.create_task(supervisor.stop_when_stdin_closes(stop)) if args.supervised else None
    try:
        await projector.run(
            database_url(),
            nats_url(),
            args.schema,
            stop=stop,
            batch_max=args.batch_max,
            commit_interval=args.commit_interval_ms / 1000,
            # Telemetry lands in the accelerator rows MF_EVENTS projects: followed by that worker.
            telemetry=not args.no_telemetry and EVENTS_STREAM in streams,
            streams=streams,
        )
    except (projector.ProjectionHalted, MigrationChanged) as exc:
        log.error("%s", exc)
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        if watch is not None:
            watch.cancel()
    return 0


def _cmd_projector(args: argparse.Namespace) -> int:
    if not args.stream:
        _supervise(args)
    # uvloop, as the gateway: less CPU per event at a trickle (docs/performance.md)
    return uvloop.run(_projector(args))


async def _replay(args: argparse.Namespace) -> int:
    from projections.batch import ProjectionHalted
    from projections.replay import ReplayFailed, replay

    try:
        result = await replay(
            database_url(),
            nats_url(),
            until_seq=args.until_seq,
            until_requests_seq=args.until_requests_seq,
            until_time=args.until_time,
            schema=args.into,
            verify=args.verify,
            swap=args.swap,
            live=args.schema,
            progress=not args.no_progress,
            batch=args.batch,
        )
    except (ProjectionHalted, ReplayFailed, MigrationChanged) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    rate = result.events / result.seconds if result.seconds > 0 else 0.0
    print(f"schema      {result.schema}")
    print("checkpoints " + ", ".join(f"{s}={q}" for s, q in sorted(result.checkpoints.items())))
    print(f"events      {result.events} in {result.seconds:.1f} s ({rate:,.0f}/s)")
    print(f"digest      {result.digest}")
    if result.requests_from > 1:
        print(
            f"requests    MF_REQUESTS before sequence {result.requests_from} aged out of the stream:"
            " not rebuilt" + (f"; compared from sequence {result.requests_from} on" if args.verify else "")
        )
    code = 0
    if args.verify:
        same = result.live_digest == result.digest
        print(f"live        {result.live_digest} ({'identical' if same else 'DIFFERENT'})")
        for line in result.differences:
            print(f"  {line}")
        code = 0 if same else 1
    if args.swap:
        print(
            f"swapped     {result.schema} is now {args.schema}"
            + (f"; the old one is {result.swapped_out}" if result.swapped_out else "")
        )
    return code


def aware_time(text: str) -> datetime:
    """An ISO 8601 time with its UTC offset; one without is refused rather than read in the local
    time zone of whoever runs the replay (which would move the cut by hours)."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r}") from None
    if when.tzinfo is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} has no UTC offset: add one, e.g. {text}Z or {text}+00:00 for UTC"
        )
    return when


def _cmd_replay(args: argparse.Namespace) -> int:
    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(_replay(args))
    return 130


def register(subparsers: Any) -> None:
    projector = subparsers.add_parser("projector", help="project MF_EVENTS and MF_REQUESTS into PostgreSQL")
    projector.add_argument("--schema", default=LIVE_SCHEMA, help="read-model schema (default: mf)")
    projector.add_argument("--batch-max", type=int, default=10_000, help="most events per transaction")
    projector.add_argument(
        "--commit-interval-ms",
        type=float,
        default=COMMIT_INTERVAL_S * 1000,
        help="least time from one commit's start to the next under steady traffic: what lets its events"
        " share a transaction, and the most lag of a read that does not wait for a write (one that waits"
        " asks, and is answered at once); longer as traffic falls, up to 60 s (projections/pace.py)"
        " (default: %(default).0f)",
    )
    projector.add_argument("--no-telemetry", action="store_true", help="do not follow MF_TELEMETRY")
    projector.add_argument(
        "--stream",
        action="append",
        choices=PROJECTED_STREAMS,
        help="project only this stream, in this process (repeatable); by default each stream gets"
        " its own worker process",
    )
    # Internal: a worker started by the supervisor stops when its stdin (a pipe from it) closes.
    projector.add_argument("--supervised", action="store_true", help=argparse.SUPPRESS)
    projector.set_defaults(handler=_cmd_projector)

    replay = subparsers.add_parser(
        "replay", help="rebuild the read model from the streams into a fresh schema"
    )
    replay.add_argument("--until-seq", type=int, help="state as of this MF_EVENTS sequence")
    replay.add_argument("--until-requests-seq", type=int, help="cut MF_REQUESTS at this sequence")
    replay.add_argument(
        "--until-time",
        type=aware_time,
        help="state as of this ISO 8601 time, with its UTC offset (2026-11-30T10:00:00Z or +01:00)",
    )
    replay.add_argument("--into", help="schema to build (default: mf_replay_<random>)")
    replay.add_argument("--schema", default=LIVE_SCHEMA, help="the live schema (default: mf)")
    replay.add_argument("--verify", action="store_true", help="compare with the live schema's digest")
    replay.add_argument("--swap", action="store_true", help="make the rebuilt schema live (blue/green)")
    replay.add_argument("--batch", type=int, default=20_000, help="events per transaction")
    replay.add_argument("--no-progress", action="store_true")
    replay.set_defaults(handler=_cmd_replay)
