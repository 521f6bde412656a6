"""Node-agent fixtures over tests.support.agents."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from pathlib import Path

import pytest

from eventstore.connection import Connection
from nodeagent.models.pull import pull_minilm
from streams.envelope import new_id
from tests.support.agents import (
    MINILM,
    PADDED,
    AgentProcess,
    manifest_records,
)


@pytest.fixture(scope="session")
def artifact_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("artifacts")
    pull_minilm(root / MINILM, install_missing=False)
    shutil.copytree(root / MINILM, root / PADDED)
    with open(root / PADDED / "padding.dat", "wb") as padding:
        padding.truncate(96 << 20)
    return root


@pytest.fixture(scope="session")
def minilm_manifest(artifact_root: Path) -> list[dict[str, object]]:
    return manifest_records(artifact_root / MINILM)


@pytest.fixture
def agents(nats_url: str, artifact_root: Path, tmp_path: Path) -> Iterator[Callable[..., AgentProcess]]:
    started: list[AgentProcess] = []

    def make(node: str, env: Mapping[str, str] | None = None, **options: str) -> AgentProcess:
        agent = AgentProcess(nats_url, node, artifact_root, tmp_path, env, **options)
        started.append(agent)
        return agent

    yield make
    for agent in started:
        agent.stop()


@pytest.fixture(scope="module")
async def serving_agent(
    nats_url: str, artifact_root: Path, connection: Connection, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[AgentProcess]:
    """One agent shared by the tests of a module; each test uses its own deployment id."""
    agent = AgentProcess(nats_url, f"node-{new_id()[:8]}", artifact_root, tmp_path_factory.mktemp("agent"))
    await agent.start(connection)
    yield agent
    agent.stop()
