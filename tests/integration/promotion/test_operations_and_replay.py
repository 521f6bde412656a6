"""Experiments reached through a project's channel, projects and their integrations, unload, and a
replay of the whole run reproducing the live read model's digest."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import psycopg
import pytest

from modelforge.devstack.postgres import PostgresServer
from projections.replay import replay
from streams import subjects
from tests.integration.projections.helpers import project_until
from tests.integration.promotion.conftest import Stack, lab_ready_candidate, production_approval

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
async def database(postgres_server: PostgresServer, stack: Stack) -> AsyncIterator[str]:
    """A database for the stack's read model. The stack's gateway (set up first, so stopped after
    this is torn down) closes its read model's waiting session before the database is dropped."""
    name = f"mfpromo_{uuid.uuid4().hex[:10]}"
    async with await psycopg.AsyncConnection.connect(postgres_server.admin_url, autocommit=True) as admin:
        await admin.execute(f'CREATE DATABASE "{name}"')
    yield postgres_server.url.rsplit("/", 1)[0] + f"/{name}"
    assert stack.gateway.replica is not None
    await stack.gateway.replica.edge.read_models.close()
    async with await psycopg.AsyncConnection.connect(postgres_server.admin_url, autocommit=True) as admin:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def embed(stack: Stack, key: str, model: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=stack.gateway.url, timeout=60) as http:
        return await http.post(
            "/v1/embeddings",
            json={"input": ["route me"], "model": model},
            headers={"authorization": f"Bearer {key}"},
        )


async def test_whole_run_operations_and_replay_digest(
    stack: Stack, minilm_source: Path, database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A stable deployment and a lab experiment of another candidate.
    stable = await lab_ready_candidate(stack, minilm_source, "ops-stable")
    approval = await stack.post("/approvals/production", production_approval(stable["candidate_id"]))
    assert isinstance(approval, dict)
    deployment = await stack.post(
        "/deployments", {"candidate_id": stable["candidate_id"], "approval_id": approval["approval_id"]}
    )
    assert isinstance(deployment, dict)
    lab = await lab_ready_candidate(stack, minilm_source, "ops-lab")
    experiment = await stack.post(
        "/experiments",
        {
            "candidate_id": lab["candidate_id"],
            "lab_approval_id": lab["lab_approval_id"],
            "route": "minilm-lab",
        },
    )
    assert isinstance(experiment, dict)
    assert experiment["status"] == "active"

    # A project bound to the experiment's route, with a bound client: its calls go to the experiment
    # whatever model they name, and to the stable deployment once the route leads nowhere.
    project = await stack.post("/projects", {"name": "docs-search", "owner": "search-team"})
    assert isinstance(project, dict)
    await stack.post(
        f"/projects/{project['project_id']}/channels",
        {"capability": "rag.embedding@1", "channel": "minilm-lab"},
    )
    client = await stack.post("/clients", {"name": "docs-app", "scopes": ["rag.embedding@1"]})
    assert isinstance(client, dict)
    await stack.post(f"/projects/{project['project_id']}/clients", {"client_id": client["client_id"]})
    by_route = await embed(stack, client["key"], "minilm-lab")
    assert by_route.headers["x-mf-deployment"] == experiment["deployment_id"]
    by_channel = await embed(stack, client["key"], "")
    assert by_channel.headers["x-mf-deployment"] == experiment["deployment_id"]
    await stack.post(f"/experiments/{experiment['deployment_id']}/deactivate")
    after = await embed(stack, client["key"], "minilm-lab")
    assert after.headers["x-mf-deployment"] == deployment["deployment_id"]  # the route is gone

    # Project fit: the seed's gates, then a recorded fit.
    fit = {"deployment_id": deployment["deployment_id"], "evidence_class": "OWNER_PHOTO",
           "recommendation": "PROMOTION_ELIGIBLE", "production_validation": "SATISFIED", "case_count": 0}  # fmt: skip
    refused = await stack.post(f"/projects/{project['project_id']}/fit", fit, expect=422)
    assert isinstance(refused, dict)
    assert refused["error"]["code"] == "PROJECT_FIT_GATES_FAILED"
    await stack.post(f"/projects/{project['project_id']}/fit", {**fit, "case_count": 20})

    # Operations: unload the resident stable deployment; policy and scheduler views.
    unloaded = await stack.post(f"/deployments/{deployment['deployment_id']}/unload")
    assert isinstance(unloaded, dict)
    assert unloaded["was_resident"] is True
    assert unloaded["reclaimed_bytes"] > 0
    await stack.post(
        f"/deployments/{deployment['deployment_id']}/residency", {"kind": "keep_warm", "keep_warm_ttl_s": 60}
    )
    revised = await stack.post("/scheduler/policy", {"settings": {"global_queue_limit": 32}})
    assert isinstance(revised, dict)
    assert revised["policy"]["global_queue_limit"] == 32
    overview = await stack.get("/scheduler/overview")
    assert isinstance(overview, dict)
    assert overview["accelerators"][0]["budget"]["total_bytes"] > 0
    plan = await stack.post("/scheduler/dry-run", {"deployment_id": deployment["deployment_id"]})
    assert isinstance(plan, dict)
    assert plan["verdict"].startswith("ADMIT")
    matrix = await stack.get("/scheduler/co-residency")
    assert isinstance(matrix, list)

    # The read model: project everything, read integrations from it, replay and compare digests.
    js = stack.connection.client.jetstream()
    heads = {
        stream: int((await js.stream_info(stream)).state.last_seq)
        for stream in (subjects.EVENTS_STREAM, subjects.REQUESTS_STREAM)
    }
    await project_until(database, stack.nats_url, heads)
    monkeypatch.setenv("DATABASE_URL", database)
    integrations = await stack.get("/integrations")
    assert isinstance(integrations, list)
    (docs,) = [row for row in integrations if row["client_id"] == client["client_id"]]
    assert docs["requests"] == 3
    assert docs["p50_ms"] is not None
    replayed = await replay(database, stack.nats_url, verify=True, progress=False)
    assert replayed.differences == []
    assert replayed.digest == replayed.live_digest
