"""A CPU worker with two threads runs queued batches of MiniLM two at once, one thread each."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import msgspec
import numpy as np

from artifacts import VerifiedArtifactSet, verify_artifact_set
from nodeagent.adapters.base import run_rows
from nodeagent.adapters.embedding import EmbeddingResult
from nodeagent.agent.residency import manifest_from_job
from nodeagent.agent.workers import Worker
from nodeagent.runtimes.onnx import OnnxRuntimeCpu
from nodeagent.worker.capabilities import EmbeddingServer, Timed
from nodeagent.worker.loading import load_blocking
from streams import contracts
from tests.support.agents import MINILM, minilm_load

TEXTS = [f"sentence {i} about the lanes of a worker, topic {i % 5}" for i in range(8)]
MAX_BATCH = 2


def verified_minilm(artifact_root: Path, manifest: list[dict[str, object]]) -> VerifiedArtifactSet:
    return verify_artifact_set(artifact_root / MINILM, manifest_from_job(manifest))


@contextlib.asynccontextmanager
async def loaded(
    artifact_root: Path, manifest: list[dict[str, object]], cpu_threads: int
) -> AsyncIterator[tuple[EmbeddingServer, OnnxRuntimeCpu]]:
    """MiniLM loaded in this process as a worker loads it (batches inline), in batches of two."""
    verified = verified_minilm(artifact_root, manifest)
    warm = await asyncio.to_thread(
        load_blocking, verified, "rag.embedding@1", None, MAX_BATCH, cpu_threads, inline_batches=True
    )
    try:
        assert isinstance(warm.server, EmbeddingServer)
        assert isinstance(warm.runtime, OnnxRuntimeCpu)
        yield warm.server, warm.runtime
    finally:
        await warm.server.close()
        warm.runtime.unload()


def alone(server: EmbeddingServer, runtime: OnnxRuntimeCpu, texts: list[str]) -> list[EmbeddingResult]:
    return run_rows(server.adapter, runtime, texts)


async def test_queued_batches_meet_inside_the_one_thread_session_at_once(
    artifact_root: Path, minilm_manifest: list[dict[str, object]]
) -> None:
    async with loaded(artifact_root, minilm_manifest, cpu_threads=2) as (server, runtime):
        batcher = server.batcher
        lane = batcher.run_lane
        assert lane is not None
        assert batcher.lanes == 2
        met = threading.Barrier(2, timeout=60)  # breaks, failing both calls, unless two lanes meet

        def meeting_lane(rows: Sequence[str]) -> Sequence[Timed[EmbeddingResult]]:
            met.wait()
            return lane(rows)

        batcher.run_lane = meeting_lane
        results = await asyncio.gather(*(batcher.submit([text]) for text in TEXTS[:4]))
        for [got], expected in zip(results, alone(server, runtime, TEXTS[:4]), strict=True):
            np.testing.assert_allclose(got.result.vector, expected.vector, atol=1e-5)
        assert {t.batch_rows for [t] in results} == {MAX_BATCH}


async def test_one_cpu_thread_means_one_lane_on_one_session(
    artifact_root: Path, minilm_manifest: list[dict[str, object]]
) -> None:
    async with loaded(artifact_root, minilm_manifest, cpu_threads=1) as (server, runtime):
        assert server.batcher.lanes == 1
        assert runtime.session_options().intra_op_num_threads == 1


async def test_a_worker_process_in_lanes_answers_each_caller_with_its_own_vectors(
    artifact_root: Path, minilm_manifest: list[dict[str, object]]
) -> None:
    load = minilm_load(artifact_root, minilm_manifest, MAX_BATCH, cpu_threads=2)
    worker = await Worker.spawn("lanes")
    try:
        await worker.load(load)
        payloads = [msgspec.json.encode(contracts.EmbeddingInput(texts=[text])) for text in TEXTS]
        served = await asyncio.gather(*(worker.invoke(payload, 60.0) for payload in payloads))
    finally:
        await worker.kill()
    async with loaded(artifact_root, minilm_manifest, cpu_threads=1) as (server, runtime):
        for reply, expected in zip(served, alone(server, runtime, TEXTS), strict=True):
            [vector] = msgspec.json.decode(reply.body, type=contracts.EmbeddingOutput).embeddings
            np.testing.assert_allclose(vector, expected.vector, atol=1e-5)
