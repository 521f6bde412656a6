"""Load, invoke (dynamic batching), health, drain, unload and probe through a real agent process."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import msgspec
import numpy as np
import pytest
from nats.aio.msg import Msg
from nats.errors import NoRespondersError

from eventstore.connection import Connection
from eventstore.replies import inbox_of
from nodeagent.adapters.base import run_rows
from nodeagent.adapters.embedding import EmbeddingAdapter
from nodeagent.runtimes.base import RuntimeOptions
from nodeagent.runtimes.onnx import OnnxRuntimeCpu
from streams import codes, subjects
from streams.contracts import EmbeddingInput, EmbeddingOutput
from streams.envelope import new_id
from streams.events import serving as s
from streams.events.control import ProbeCompleted
from streams.messages import DrainJob, InvokeReply, InvokeRequest, ProbeJob, UnloadJob
from streams.subjects import Aggregate
from tests.support.agents import (
    MINILM,
    WAIT_S,
    AgentProcess,
    checked_health,
    job_running,
    load_job,
    load_outcome,
    next_event,
    publish_job,
    stopped,
)


async def load(
    connection: Connection, agent: AgentProcess, deployment: str, manifest: list[dict[str, object]]
) -> s.ResidencyLoaded | s.ResidencyLoadFailed:
    job = load_job(agent.node, deployment, MINILM, manifest)
    await publish_job(connection, job)
    return await load_outcome(connection, job.accelerator_id, job.load_id)


def invoke_request(deployment: str, texts: list[str], deadline_ms: int = 30_000) -> bytes:
    request = InvokeRequest(
        request_id=new_id(),
        capability="rag.embedding@1",
        deployment_id=deployment,
        deadline_unix_ms=time.time_ns() // 1_000_000 + deadline_ms,
        payload=msgspec.Raw(msgspec.json.encode(EmbeddingInput(texts=texts))),
    )
    return msgspec.json.encode(request)


async def invoke(
    connection: Connection,
    node: str,
    deployment: str,
    texts: list[str],
    deadline_ms: int = 30_000,
    timeout: float = 30.0,
) -> InvokeReply:
    msg = await connection.client.request(
        subjects.invoke_subject(node, deployment), invoke_request(deployment, texts, deadline_ms), timeout
    )
    return msgspec.json.decode(msg.data, type=InvokeReply)


async def unload(
    connection: Connection, agent: AgentProcess, deployment: str
) -> s.ResidencyUnloaded | s.ResidencyUnloadFailed:
    """Send the agent an unload job for `deployment` (on its CPU device); return its outcome."""
    job = UnloadJob(
        job_id=new_id(), node_id=agent.node, deployment_id=deployment, accelerator_id=f"{agent.node}-cpu0"
    )
    await publish_job(connection, job)
    outcome: s.ResidencyUnloaded | s.ResidencyUnloadFailed = await next_event(
        connection,
        Aggregate.ACCELERATOR,
        job.accelerator_id,
        lambda e: (
            isinstance(e, s.ResidencyUnloaded | s.ResidencyUnloadFailed) and e.deployment_id == deployment
        ),
    )
    return outcome


def drain_job(agent: AgentProcess, deployment: str, accelerator: str) -> DrainJob:
    return DrainJob(job_id=new_id(), node_id=agent.node, deployment_id=deployment, accelerator_id=accelerator)


async def drained(connection: Connection, job: DrainJob) -> None:
    """Return once the drain job is recorded done."""
    await next_event(
        connection,
        Aggregate.ACCELERATOR,
        job.accelerator_id,
        lambda e: isinstance(e, s.ResidencyDrained) and e.job_id == job.job_id,
    )


async def drain(connection: Connection, agent: AgentProcess, deployment: str, accelerator: str) -> None:
    """Send the agent a drain job for `deployment`; return once it is recorded drained."""
    job = drain_job(agent, deployment, accelerator)
    await publish_job(connection, job)
    await drained(connection, job)


async def invokes_sent(
    connection: Connection, node: str, deployment: str, count: int = 8
) -> list[asyncio.Future[Msg]]:
    """`count` invokes of 16 short texts each, on the wire when this returns; their replies to come."""
    subject = subjects.invoke_subject(node, deployment)
    texts = [f"text {i}" for i in range(16)]
    inbox = inbox_of(connection.client)
    return [await inbox.send(subject, invoke_request(deployment, texts), WAIT_S) for _ in range(count)]


async def answered(pending: list[asyncio.Future[Msg]]) -> list[EmbeddingOutput]:
    return [embeddings_of(msgspec.json.decode((await msg).data, type=InvokeReply)) for msg in pending]


def embeddings_of(reply: InvokeReply) -> EmbeddingOutput:
    assert reply.ok, (reply.code, reply.message)
    return msgspec.json.decode(reply.result, type=EmbeddingOutput)


@pytest.fixture(scope="module")
def direct(artifact_root: Path) -> tuple[EmbeddingAdapter, OnnxRuntimeCpu]:
    runtime = OnnxRuntimeCpu()
    runtime.load(artifact_root / MINILM / "model.onnx", RuntimeOptions())
    return EmbeddingAdapter.from_model_dir(artifact_root / MINILM), runtime


async def test_a_load_job_appends_loading_then_loaded_with_measured_memory(
    connection: Connection, serving_agent: AgentProcess, minilm_manifest: list[dict[str, object]]
) -> None:
    loaded = await load(connection, serving_agent, "dep-load", minilm_manifest)
    assert isinstance(loaded, s.ResidencyLoaded)
    assert loaded.runtime == "onnxruntime-cpu"
    assert loaded.measured_bytes == loaded.loaded_bytes - loaded.baseline_bytes > 0
    assert loaded.peak_bytes >= loaded.loaded_bytes
    assert loaded.cold_load_ms > 0
    loading = await next_event(
        connection,
        Aggregate.ACCELERATOR,
        loaded.accelerator_id,
        lambda e: isinstance(e, s.ResidencyLoading) and e.load_id == loaded.load_id,
    )
    assert loading.generation == loaded.generation


async def test_concurrent_invokes_get_their_own_correct_embeddings(
    connection: Connection,
    serving_agent: AgentProcess,
    minilm_manifest: list[dict[str, object]],
    direct: tuple[EmbeddingAdapter, OnnxRuntimeCpu],
) -> None:
    assert isinstance(await load(connection, serving_agent, "dep-batch", minilm_manifest), s.ResidencyLoaded)
    texts = [f"sentence number {i} about {'cats' if i % 2 else 'distributed systems'}" for i in range(32)]
    replies = await asyncio.gather(*(invoke(connection, serving_agent.node, "dep-batch", [t]) for t in texts))
    expected = run_rows(direct[0], direct[1], texts)
    for text, reply, want in zip(texts, replies, expected, strict=True):
        output = embeddings_of(reply)
        assert output.dimension == 384
        assert len(output.embeddings) == 1
        got = np.asarray(output.embeddings[0])
        assert float(got @ want.vector) > 0.999, text
        assert output.input_tokens == want.token_count


async def test_an_invoke_past_its_deadline_is_refused_without_running(
    connection: Connection, serving_agent: AgentProcess, minilm_manifest: list[dict[str, object]]
) -> None:
    assert isinstance(await load(connection, serving_agent, "dep-late", minilm_manifest), s.ResidencyLoaded)
    reply = await invoke(connection, serving_agent.node, "dep-late", ["too late"], deadline_ms=-1)
    assert (reply.ok, reply.code) == (False, codes.REQUEST_TIMEOUT.code)


async def test_an_invoke_that_breaks_the_contract_is_invalid_input(
    connection: Connection, serving_agent: AgentProcess, minilm_manifest: list[dict[str, object]]
) -> None:
    assert isinstance(await load(connection, serving_agent, "dep-bad", minilm_manifest), s.ResidencyLoaded)
    reply = await invoke(connection, serving_agent.node, "dep-bad", [])
    assert (reply.ok, reply.code) == (False, codes.INVALID_INPUT.code)


async def test_health_reports_every_layer_of_a_resident_model(
    connection: Connection, serving_agent: AgentProcess, minilm_manifest: list[dict[str, object]]
) -> None:
    assert isinstance(await load(connection, serving_agent, "dep-health", minilm_manifest), s.ResidencyLoaded)
    checked = await checked_health(connection, serving_agent.node, "dep-health")
    assert (checked.process_ok, checked.runtime_ok, checked.model_ok, checked.code) == (True, True, True, "")


async def test_drain_stops_invokes_and_unload_shows_memory_reclaimed(
    connection: Connection, serving_agent: AgentProcess, minilm_manifest: list[dict[str, object]]
) -> None:
    loaded = await load(connection, serving_agent, "dep-drain", minilm_manifest)
    embeddings_of(await invoke(connection, serving_agent.node, "dep-drain", ["still serving"]))
    await drain(connection, serving_agent, "dep-drain", loaded.accelerator_id)
    with pytest.raises(NoRespondersError):
        await invoke(connection, serving_agent.node, "dep-drain", ["no longer served"])
    outcome = await unload(connection, serving_agent, "dep-drain")
    assert isinstance(outcome, s.ResidencyUnloaded)
    assert outcome.reclaimed_bytes > 0


async def test_a_drain_answers_the_invokes_delivered_before_it_and_is_recorded_once_they_are(
    connection: Connection, serving_agent: AgentProcess, minilm_manifest: list[dict[str, object]]
) -> None:
    loaded = await load(connection, serving_agent, "dep-drain-busy", minilm_manifest)
    # The worker is stopped, so the invokes are still in it when the drain runs, however fast or
    # slow the machine (long batches as a clock ran past their deadline on a loaded one).
    with stopped(serving_agent.workers()["dep-drain-busy"]):
        # The invokes, then the drain job, go out on one connection in that order, so the agent has
        # every invoke delivered before its job consumer is handed the drain.
        pending = await invokes_sent(connection, serving_agent.node, "dep-drain-busy")
        job = drain_job(serving_agent, "dep-drain-busy", loaded.accelerator_id)
        await job_running(connection, job)  # draining, with every invoke still in the stopped worker
        assert not any(reply.done() for reply in pending)
    await drained(connection, job)
    # The agent sent every reply before it recorded the drain, on one connection: they are all in.
    assert all(reply.done() for reply in pending)
    assert all(len(output.embeddings) == 16 for output in await answered(pending))


async def test_a_probe_measures_the_envelope_and_unloads(
    connection: Connection, serving_agent: AgentProcess, minilm_manifest: list[dict[str, object]]
) -> None:
    candidate = f"cand-{new_id()[:8]}"
    job = ProbeJob(
        job_id=new_id(),
        node_id=serving_agent.node,
        deployment_id="dep-probe",
        accelerator_id=f"{serving_agent.node}-cpu0",
        probe_id=new_id(),
        candidate_id=candidate,
        artifact_set_id="set-minilm",
        capability="rag.embedding@1",
        artifact_root=MINILM,
        manifest=minilm_manifest,
    )
    await publish_job(connection, job)
    done = await next_event(connection, Aggregate.CANDIDATE, candidate, lambda e: True)
    assert isinstance(done, ProbeCompleted), done
    assert done.health.process
    assert done.health.runtime
    assert done.health.model
    assert done.output_valid
    assert (done.output_dimension, done.output_normalized) == (384, True)  # measured, for the gates
    # What the model holds at the least: its file, whatever the process's RSS showed.
    assert done.weights_bytes == next(f["size"] for f in minilm_manifest if f["path"] == "model.onnx")
    assert done.peak_bytes >= done.loaded_bytes
    assert done.cold_load_ms > 0
    assert done.inference_ms > 0
    assert done.unload_reclaimed_bytes > 0
