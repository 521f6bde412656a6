"""Node-agent test support: a real MiniLM artifact set on disk, agent subprocesses, jobs on MF_WORK
and waits on the event log — shared by the agent and gateway integration tests."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import msgspec

from artifacts import build_manifest, verify_artifact_set
from eventstore.connection import Connection
from eventstore.subscription import subscribe
from nodeagent.agent.jobs import consumer_name
from nodeagent.agent.residency import manifest_from_job
from nodeagent.settings import SPARE_WORKER_ENV
from nodeagent.worker.protocol import Load
from streams import subjects
from streams.codec import UnknownEvent
from streams.envelope import new_id
from streams.events import Event
from streams.events import serving as s
from streams.messages import AcceleratorTelemetry, AnyJob, HealthJob, LoadJob
from streams.subjects import Aggregate

WAIT_S = 60.0  # generous: a bound on a hung test, not a timing assertion


MINILM = "minilm"


PADDED = "minilm-padded"  # the same model plus 96 MiB of zeros: a load slow enough to be killed mid-way


def manifest_records(folder: Path) -> list[dict[str, object]]:
    return [
        {"path": f.path, "sha256": f.sha256, "size": f.size_bytes, "format": f.format.value}
        for f in build_manifest(folder).files
    ]


def load_job(node: str, deployment: str, folder: str, manifest: list[dict[str, object]]) -> LoadJob:
    return LoadJob(
        job_id=new_id(),
        node_id=node,
        deployment_id=deployment,
        accelerator_id=f"{node}-cpu0",
        load_id=new_id(),
        artifact_set_id=f"set-{folder}",
        capability="rag.embedding@1",
        artifact_root=folder,
        manifest=manifest,
    )


async def publish_job(connection: Connection, job: AnyJob, msg_id: str | None = None) -> int:
    """Publish the job and return its stream sequence; another `msg_id` than its job id gets past
    the stream's duplicate check, as a redelivery of the same job would."""
    op = str(type(job).__struct_config__.tag)
    subject = subjects.job_subject(job.node_id, job.deployment_id, op)
    js = connection.client.jetstream()
    ack = await js.publish(subject, msgspec.json.encode(job), headers={"Nats-Msg-Id": msg_id or job.job_id})
    return ack.seq


async def job_running(connection: Connection, job: AnyJob) -> None:
    """Publish the job; return once its agent says it is running it: the agent's in-progress ack
    of that delivery (sent every third of the job ack wait while a job runs)."""
    # A plain subscriber sees the acks the agent sends its consumer: `$JS.ACK.<stream>.<consumer>.
    # <delivered>.<stream seq>.<consumer seq>.<time>.<pending>`.
    acks = await connection.client.subscribe(f"$JS.ACK.{subjects.WORK_STREAM}.{consumer_name(job.node_id)}.>")
    try:
        await connection.client.flush()  # the server holds the interest before the job goes out
        seq = await publish_job(connection, job)
        async with asyncio.timeout(WAIT_S):
            while True:
                ack = await acks.next_msg(timeout=WAIT_S)
                if ack.data == b"+WPI" and int(ack.subject.split(".")[5]) == seq:
                    return
    finally:
        await acks.unsubscribe()


@contextlib.contextmanager
def stopped(pid: int) -> Iterator[None]:
    """The process `pid` stopped (SIGSTOP) for the block: what it is asked meanwhile waits in it,
    however fast or slow the machine is; it runs on (SIGCONT) after."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):  # killed meanwhile: nothing to continue
            os.kill(pid, signal.SIGCONT)


async def next_event(
    connection: Connection, aggregate: Aggregate, aggregate_id: str, matches: Callable[[Event], bool]
) -> Any:
    """The first event of the aggregate (from its beginning) that matches; fails after WAIT_S."""
    scope = subjects.aggregate_filter(aggregate, aggregate_id)
    async with asyncio.timeout(WAIT_S):
        async for record in subscribe(connection.client, filter_subject=scope):
            event = record.event
            if not isinstance(event, UnknownEvent) and matches(event):
                return event
    raise AssertionError("subscription ended")


async def load_outcome(
    connection: Connection, accelerator_id: str, load_id: str
) -> s.ResidencyLoaded | s.ResidencyLoadFailed:
    """A load's outcome: its ResidencyLoaded or ResidencyLoadFailed."""
    outcome: s.ResidencyLoaded | s.ResidencyLoadFailed = await next_event(
        connection,
        Aggregate.ACCELERATOR,
        accelerator_id,
        lambda e: isinstance(e, s.ResidencyLoaded | s.ResidencyLoadFailed) and e.load_id == load_id,
    )
    return outcome


async def checked_health(connection: Connection, node: str, deployment: str) -> s.ResidencyHealthChecked:
    """Send a health job for the deployment and return what it found."""
    job = HealthJob(job_id=new_id(), node_id=node, deployment_id=deployment, accelerator_id=f"{node}-cpu0")
    await publish_job(connection, job)
    checked: s.ResidencyHealthChecked = await next_event(
        connection,
        Aggregate.ACCELERATOR,
        job.accelerator_id,
        lambda e: isinstance(e, s.ResidencyHealthChecked) and e.job_id == job.job_id,
    )
    return checked


async def aggregate_events(connection: Connection, aggregate: Aggregate, aggregate_id: str) -> list[Event]:
    from eventstore import reading

    records, _ = await reading.load(connection.client, aggregate, aggregate_id)
    return [r.event for r in records if not isinstance(r.event, UnknownEvent)]


def minilm_load(
    artifact_root: Path, manifest: list[dict[str, object]], max_batch: int, cpu_threads: int, serves: str = ""
) -> Load:
    """A worker's `Load` of MiniLM from `artifact_root` (verified here, as the agent would)."""
    verified = verify_artifact_set(artifact_root / MINILM, manifest_from_job(manifest))
    return Load(
        folder=str(verified.root),
        manifest=verified.manifest.to_dict(),
        bytes_verified=verified.bytes_verified,
        capability="rag.embedding@1",
        gpu_index=None,
        max_batch=max_batch,
        cpu_threads=cpu_threads,
        serves=serves,
    )


def worker_pids(parent: int) -> dict[str, int]:
    """The live worker processes of the agent `parent`, by what each serves (the process title its
    load set says: `python -m nodeagent.worker ... --serves NAME`); a reaped or zombie worker, and
    a spare no load has taken, are not listed."""
    return {
        argv[argv.index(b"--serves") + 1].decode(): pid
        for pid, argv in _worker_commands(parent)
        if b"--serves" in argv
    }


def spare_pids(parent: int) -> list[int]:
    """The worker processes of the agent `parent` that no load has taken (no `--serves`)."""
    return [pid for pid, argv in _worker_commands(parent) if b"--serves" not in argv]


def _worker_commands(parent: int) -> list[tuple[int, list[bytes]]]:
    """Each live `nodeagent.worker` child of `parent` and its command line's words."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            argv = (entry / "cmdline").read_bytes().replace(b"\0", b" ").split()
        except OSError:  # gone meanwhile
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent and b"nodeagent.worker" in argv:
            found.append((int(entry.name), argv))
    return found


def gone(pid: int) -> bool:
    """No process `pid` any more, not even a zombie: it has exited and been reaped."""
    return not os.path.exists(f"/proc/{pid}")


class AgentProcess:
    """`modelforge agent` as a real subprocess (so it can be SIGKILLed)."""

    def __init__(
        self,
        nats_url: str,
        node: str,
        root: Path,
        log_dir: Path,
        env: Mapping[str, str] | None = None,
        **options: str,
    ) -> None:
        self.node, self.root, self.nats_url, self.env = node, root, nats_url, dict(env or {})
        self.options = {"--telemetry-interval": "0.5", "--job-ack-wait": "2", **options}
        self.log = log_dir / f"agent-{node}.log"
        self.process: subprocess.Popen[bytes] | None = None

    async def start(self, connection: Connection) -> AcceleratorTelemetry:
        """Start it and return its first telemetry: the new generation is registered and live."""
        return await self._telemetry_after(connection, self.launch, healthy=True)

    async def terminating(self, connection: Connection) -> AcceleratorTelemetry:
        """Send it SIGTERM and return its last telemetry (unhealthy): it has stopped taking jobs and
        is answering the invokes it holds before it exits."""
        return await self._telemetry_after(connection, self.terminate, healthy=False)

    def terminate(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)

    async def _telemetry_after(
        self, connection: Connection, action: Callable[[], None], healthy: bool
    ) -> AcceleratorTelemetry:
        """Do `action`, then return the node's first telemetry whose health is `healthy`."""
        sub = await connection.client.subscribe(f"{subjects.TELEMETRY_PREFIX}.{self.node}.>")
        try:
            # The server holds the interest before the action: an agent told to stop sends its
            # last (unhealthy) sample once, and a SUB still in this client's buffer would miss it.
            await connection.client.flush()
            action()
            async with asyncio.timeout(WAIT_S):
                while True:
                    msg = await sub.next_msg(timeout=WAIT_S)
                    sample = msgspec.json.decode(msg.data, type=AcceleratorTelemetry)
                    if sample.healthy == healthy:
                        return sample
        finally:
            await sub.unsubscribe()

    def launch(self) -> None:
        """Start it, waiting for nothing (`start` waits for its first telemetry)."""
        self.process = self._spawn()

    def _spawn(self) -> subprocess.Popen[bytes]:
        args = [arg for pair in self.options.items() for arg in pair]
        command = [sys.executable, "-m", "modelforge.cli", "agent", "--node-id", self.node]
        # No spare worker unless a test asks (its env): one more process spawned at each agent's
        # start and after each load, ~0.3 s of CPU each, which the suite's hundreds of loads would
        # add to CI's time. tests/integration/nodeagent/test_spare_worker.py runs an agent with it.
        spare = {SPARE_WORKER_ENV: "0"}
        with open(self.log, "ab") as log:
            return subprocess.Popen(
                [*command, "--artifact-root", str(self.root), *args],
                env={**os.environ, **spare, "NATS_URL": self.nats_url, **self.env},
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def workers(self) -> dict[str, int]:
        """Its worker processes now, by the deployment (or candidate) each serves."""
        return worker_pids(self.pid)

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> int:
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else 0
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            self.kill()
            return -9
