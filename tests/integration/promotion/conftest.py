"""Promotion fixtures: each module gets its own nats-server, a real agent on an empty artifact
root, an in-process gateway with an operator token, and an admin HTTP client. Artifact sets are
imported from a pulled MiniLM folder through the admin API, exactly as an operator would."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from eventstore.connection import Connection, connect
from eventstore.provision import provision
from modelforge.devstack.nats_server import NatsServer, start_nats
from modelforge.devstack.processes import stop_pid
from nodeagent.models.pull import pull_minilm
from streams import subjects
from streams.envelope import new_id
from tests.support.agents import AgentProcess
from tests.support.serving import InProcessGateway

TOKEN = "operator-token-for-tests"


class Stack(msgspec.Struct):
    nats_url: str
    connection: Connection
    node: str
    artifact_root: Path
    gateway: InProcessGateway
    admin: httpx.AsyncClient

    async def events_head(self) -> int:
        info = await self.connection.client.jetstream().stream_info(subjects.EVENTS_STREAM)
        return int(info.state.last_seq)

    async def post(self, path: str, body: object = None, expect: int = 200) -> object:
        response = await self.admin.post(f"/admin/v1{path}", json=body if body is not None else {})
        assert response.status_code == expect, response.text
        return response.json()

    async def get(self, path: str) -> object:
        response = await self.admin.get(f"/admin/v1{path}")
        assert response.status_code == 200, response.text
        return response.json()


@pytest.fixture(scope="session")
def minilm_source(scratch: Path) -> Path:
    return pull_minilm(scratch / "promotion-sources" / "minilm", install_missing=False)


@pytest.fixture
def model_copy(minilm_source: Path, tmp_path: Path) -> Path:
    """A private copy of the MiniLM folder that a test may add files to."""
    folder = tmp_path / "model"
    shutil.copytree(minilm_source, folder)
    return folder


@pytest.fixture(scope="module")
def module_nats(scratch: Path) -> Iterator[NatsServer]:
    server = start_nats(scratch / f"nats-{new_id()[:8]}")
    yield server
    stop_pid(server.pid)


@pytest.fixture(scope="module")
async def stack(module_nats: NatsServer, scratch: Path) -> AsyncIterator[Stack]:
    connection = await connect(module_nats.url, "promotion-tests")
    await provision(connection.client)
    node = f"node-{new_id()[:6]}"
    root = scratch / f"artifacts-{node}"
    root.mkdir()
    agent = AgentProcess(module_nats.url, node, root, scratch)
    await agent.start(connection)
    gateway = InProcessGateway()
    await gateway.start(module_nats.url)
    assert gateway.replica is not None
    gateway.replica.edge.operator_token = TOKEN
    headers = {"authorization": f"Bearer {TOKEN}", "x-mf-operator": "tests"}
    async with httpx.AsyncClient(base_url=gateway.url, headers=headers, timeout=120) as admin:
        yield Stack(module_nats.url, connection, node, root, gateway, admin)
    await gateway.stop()
    agent.stop()
    await connection.close()


async def refused(
    stack: Stack, path: str, body: dict[str, Any], code: str, status: int = 409
) -> dict[str, Any]:
    """The refusal of a command: its code, and nothing appended to the event log."""
    head = await stack.events_head()
    error = await stack.post(path, body, expect=status)
    assert isinstance(error, dict)
    assert error["error"]["code"] == code, error
    assert await stack.events_head() == head, "a refusal must change nothing"
    return error


def production_approval(candidate_id: object, **extra: object) -> dict[str, object]:
    """The body of a production approval: the candidate, and the supply-chain review and reason an
    approval requires (its approver is the stack's x-mf-operator)."""
    review = "tests: MiniLM pulled by the test session; files hashed at import, verified by the agent"
    return {"candidate_id": candidate_id, "supply_chain_review": review, "reason": "tests", **extra}


EMBEDDING_PROFILE = {"dimension": "384", "normalized": "true", "input_semantics": "symmetric"}


async def lab_ready_candidate(stack: Stack, source: Path, name: str, **config: str) -> dict[str, object]:
    """Import → verify → candidate → lab approval → probe: a lab_ready candidate (as a dict)."""
    probed = await probed_candidate(stack, source, name, EMBEDDING_PROFILE, **config)
    assert probed["status"] == "lab_ready", probed
    return probed


async def probed_candidate(
    stack: Stack,
    source: Path,
    name: str,
    profile: dict[str, str],
    *,
    capability: str = "rag.embedding@1",
    **config: str,
) -> dict[str, object]:
    """Import (for `capability`) → verify → candidate declaring `profile` (its capability the
    set's) → lab approval → probe, whatever it found."""
    imported = await stack.post(
        "/artifact-sets/import",
        {
            "source": str(source),
            "name": name,
            "node_id": stack.node,
            "artifact_root": str(stack.artifact_root),
            "capability": capability,
        },
    )
    assert isinstance(imported, dict)
    assert imported["status"] == "verified", imported
    candidate = await stack.post(
        "/candidates",
        {
            "candidate_id": f"cand-{name}",
            "artifact_set_id": imported["artifact_set_id"],
            "runtime_profile": profile,
            "deployment_config": {"model_name": name, **config},
        },
    )
    assert isinstance(candidate, dict)
    lab = await stack.post(
        "/approvals/lab", {"candidate_id": candidate["candidate_id"], "node_ids": [stack.node]}
    )
    assert isinstance(lab, dict)
    probed = await stack.post(
        f"/candidates/{candidate['candidate_id']}/probes", {"lab_approval_id": lab["approval_id"]}
    )
    assert isinstance(probed, dict)
    probed["lab_approval_id"] = lab["approval_id"]
    return probed
