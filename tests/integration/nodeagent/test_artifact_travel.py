"""Artifact travel: a set stored in the artifact bucket (as `artifacts import` stores it, from
another machine's folder) is served by an agent whose artifact root never had its files. The agent
fetches it into its cache and verifies it first; a cached file tampered with is caught at the next
load and fetched again; a set larger than the cache budget is refused with its code; a set a loaded
model holds is never evicted to make room, an unloaded one is."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest

from artifacts import build_manifest
from artifacts.bucket import put_set
from eventstore.connection import Connection
from nodeagent.agent.artifact_cache import CACHE_FOLDER
from streams import codes, subjects
from streams.envelope import new_id
from streams.events import serving as s
from streams.events.control import ArtifactSetFetchProgressed
from streams.messages import AcceleratorTelemetry, LoadJob
from streams.subjects import Aggregate
from tests.integration.nodeagent.test_agent_artifacts import flip_one_byte
from tests.integration.nodeagent.test_agent_serving import unload
from tests.support.agents import (
    MINILM,
    WAIT_S,
    AgentProcess,
    aggregate_events,
    checked_health,
    load_job,
    load_outcome,
    manifest_records,
    publish_job,
)


@pytest.fixture(scope="module")
async def stored_minilm(connection: Connection, artifact_root: Path) -> list[dict[str, object]]:
    """MiniLM's manifest, its files stored in the artifact bucket."""
    await put_set(connection.client, artifact_root / MINILM, build_manifest(artifact_root / MINILM))
    return manifest_records(artifact_root / MINILM)


def set_bytes(manifest: list[dict[str, object]]) -> int:
    return sum(int(str(record["size"])) for record in manifest)


@pytest.fixture
async def fresh_agent(
    nats_url: str,
    connection: Connection,
    tmp_path: Path,
    minilm_manifest: list[dict[str, object]],
    request: pytest.FixtureRequest,
) -> AsyncIterator[AgentProcess]:
    """An agent on an empty artifact root; `@pytest.mark.parametrize("fresh_agent", [sets])`
    sets its cache budget to that many MiniLM sets' bytes (default 10)."""
    root = tmp_path / "empty-root"
    root.mkdir()
    budget = str(int(getattr(request, "param", 10) * set_bytes(minilm_manifest)))
    agent = AgentProcess(
        nats_url, f"node-{new_id()[:8]}", root, tmp_path, **{"--artifact-cache-bytes": budget}
    )
    await agent.start(connection)
    yield agent
    agent.stop()


async def loaded(
    connection: Connection,
    agent: AgentProcess,
    deployment: str,
    manifest: list[dict[str, object]],
    folder: str = MINILM,  # the set is `set-<folder>`
) -> tuple[LoadJob, s.ResidencyLoaded | s.ResidencyLoadFailed]:
    job = load_job(agent.node, deployment, folder, manifest)
    await publish_job(connection, job)
    return job, await load_outcome(connection, job.accelerator_id, job.load_id)


async def fetches(connection: Connection, job: LoadJob) -> list[ArtifactSetFetchProgressed]:
    events = await aggregate_events(connection, Aggregate.ARTIFACT_SET, job.artifact_set_id)
    return [e for e in events if isinstance(e, ArtifactSetFetchProgressed) and e.job_id == job.job_id]


async def test_an_agent_whose_root_never_had_the_files_fetches_the_set_and_serves_it(
    connection: Connection, fresh_agent: AgentProcess, stored_minilm: list[dict[str, object]]
) -> None:
    job, outcome = await loaded(connection, fresh_agent, "dep-travel", stored_minilm)
    assert isinstance(outcome, s.ResidencyLoaded), outcome
    assert (await checked_health(connection, fresh_agent.node, "dep-travel")).model_ok
    assert not (fresh_agent.root / MINILM).exists()
    cached = fresh_agent.root / CACHE_FOLDER / job.artifact_set_id
    assert sorted(p.name for p in cached.iterdir()) == sorted(str(r["path"]) for r in stored_minilm)
    progress = await fetches(connection, job)
    total = set_bytes(stored_minilm)
    assert [p.total_bytes for p in progress] == [total] * len(progress)
    assert (progress[0].fetched_bytes, progress[-1].fetched_bytes) == (0, total)
    assert len(progress) <= 5  # its start, each quarter, its end: never one per file or chunk


async def test_a_nodes_telemetry_names_the_sets_it_holds_once_it_fetched_one(
    connection: Connection, fresh_agent: AgentProcess, stored_minilm: list[dict[str, object]]
) -> None:
    sub = await connection.client.subscribe(f"{subjects.TELEMETRY_PREFIX}.{fresh_agent.node}.>")
    try:
        job, outcome = await loaded(connection, fresh_agent, "dep-told", stored_minilm)
        assert isinstance(outcome, s.ResidencyLoaded), outcome
        while True:  # each sample until one names the set (the next one after the load)
            msg = await sub.next_msg(timeout=WAIT_S)
            sample = msgspec.json.decode(msg.data, type=AcceleratorTelemetry)
            if sample.cached_sets:
                break
    finally:
        await sub.unsubscribe()
    assert sample.cached_sets == [job.artifact_set_id]


async def test_a_tampered_cached_file_is_refused_and_fetched_again(
    connection: Connection, fresh_agent: AgentProcess, stored_minilm: list[dict[str, object]]
) -> None:
    first, outcome = await loaded(connection, fresh_agent, "dep-first", stored_minilm)
    assert isinstance(outcome, s.ResidencyLoaded), outcome
    model = fresh_agent.root / CACHE_FOLDER / first.artifact_set_id / "model.onnx"
    flip_one_byte(model)
    second, outcome = await loaded(connection, fresh_agent, "dep-second", stored_minilm)
    assert isinstance(outcome, s.ResidencyLoaded), outcome
    assert await fetches(connection, second)  # fetched again, not loaded as it was
    [entry] = [r for r in stored_minilm if r["path"] == "model.onnx"]
    assert hashlib.sha256(model.read_bytes()).hexdigest() == entry["sha256"]


@pytest.mark.parametrize("fresh_agent", [0.5], indirect=True)
async def test_a_set_larger_than_the_cache_budget_is_refused_with_its_code(
    connection: Connection, fresh_agent: AgentProcess, stored_minilm: list[dict[str, object]]
) -> None:
    job, outcome = await loaded(connection, fresh_agent, "dep-too-big", stored_minilm)
    assert isinstance(outcome, s.ResidencyLoadFailed), outcome
    assert outcome.code == codes.ARTIFACT_SET_EXCEEDS_CACHE.code
    assert not (fresh_agent.root / CACHE_FOLDER / job.artifact_set_id).exists()


@pytest.mark.parametrize("fresh_agent", [1.5], indirect=True)
async def test_a_set_a_loaded_model_holds_is_not_evicted_and_an_unloaded_one_is(
    connection: Connection, fresh_agent: AgentProcess, stored_minilm: list[dict[str, object]]
) -> None:
    # Two sets of the same files (stored once in the bucket); the budget holds one.
    first, outcome = await loaded(connection, fresh_agent, "dep-held", stored_minilm)
    assert isinstance(outcome, s.ResidencyLoaded), outcome
    _, refused = await loaded(connection, fresh_agent, "dep-other", stored_minilm, "minilm-other")
    assert isinstance(refused, s.ResidencyLoadFailed), refused
    assert refused.code == codes.ARTIFACT_SET_EXCEEDS_CACHE.code
    assert isinstance(await unload(connection, fresh_agent, "dep-held"), s.ResidencyUnloaded)
    second, outcome = await loaded(connection, fresh_agent, "dep-other", stored_minilm, "minilm-other")
    assert isinstance(outcome, s.ResidencyLoaded), outcome
    cache = fresh_agent.root / CACHE_FOLDER
    assert not (cache / first.artifact_set_id).exists()
    assert (cache / second.artifact_set_id).is_dir()
