"""A client bound to a project calls only the capabilities its project is bound to (403
PROJECT_CAPABILITY_NOT_BOUND otherwise, recorded like any authorization refusal), a binding made
later holds at once on the running gateway, and a client created with a project is one of the
project's clients, as one bound to it later is."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from gateway.clients.service import ClientService
from streams.envelope import new_id
from tests.integration.clients.test_clients_cli import clients
from tests.integration.gateway.conftest import SHARES_THE_STACK, Stack, refused_leaving_no_trace, stack_admin

pytestmark = SHARES_THE_STACK

EMBEDDING, RERANKING = "rag.embedding@1", "rag.reranking@1"
TOKEN = "operator-token-for-project-tests"


@pytest.fixture(scope="module")
async def admin(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    async with stack_admin(stack, TOKEN) as http:
        yield http


async def posted(admin: httpx.AsyncClient, path: str, body: object) -> Any:
    response = await admin.post(path, json=body)
    assert response.status_code == 200, response.text
    return response.json()


async def project_bound_to(admin: httpx.AsyncClient, *capabilities: str) -> str:
    project = await posted(admin, "/projects", {"name": f"proj-{new_id()[:8]}"})
    for capability in capabilities:
        await posted(admin, f"/projects/{project['project_id']}/channels", {"capability": capability})
    return str(project["project_id"])


async def client_of(admin: httpx.AsyncClient, project_id: str) -> dict[str, Any]:
    """A client of `project_id` (created with it) whose scopes hold both capabilities."""
    body = {"name": f"bound-{new_id()[:8]}", "scopes": [EMBEDDING, RERANKING], "project_id": project_id}
    created: dict[str, Any] = await posted(admin, "/clients", body)
    assert created["applied"] is True
    return created


async def embed(stack: Stack, key: str) -> httpx.Response:
    async with httpx.AsyncClient(timeout=60) as http:
        return await http.post(
            f"{stack.gateway.url}/v1/embeddings",
            json={"input": "hello"},
            headers={"authorization": f"Bearer {key}"},
        )


async def test_a_bound_client_calls_the_capability_its_project_is_bound_to(
    stack: Stack, admin: httpx.AsyncClient
) -> None:
    client = await client_of(admin, await project_bound_to(admin, EMBEDDING))
    response = await embed(stack, client["key"])
    assert response.status_code == 200, response.text
    assert response.headers["x-mf-deployment"] == stack.deployment_id


async def test_a_bound_client_is_refused_a_scoped_capability_its_project_is_not_bound_to(
    stack: Stack, admin: httpx.AsyncClient
) -> None:
    client = await client_of(admin, await project_bound_to(admin, RERANKING))
    # Recorded as a missing scope is: refused at the key check, before the request is accepted.
    response = await refused_leaving_no_trace(
        stack.connection, stack.gateway, "/v1/embeddings", client["key"], {"input": "hello"}, recorded=False
    )
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "PROJECT_CAPABILITY_NOT_BOUND"
    assert response.json()["error"]["param"] == "model"


async def test_a_missing_scope_is_refused_with_the_same_trace_as_a_missing_project_binding(
    stack: Stack, admin: httpx.AsyncClient
) -> None:
    unscoped = await posted(admin, "/clients", {"name": f"unscoped-{new_id()[:8]}", "scopes": [RERANKING]})
    response = await refused_leaving_no_trace(
        stack.connection, stack.gateway, "/v1/embeddings", unscoped["key"], {"input": "hello"}, recorded=False
    )
    assert (response.status_code, response.json()["error"]["code"]) == (403, "CAPABILITY_NOT_AUTHORIZED")


async def test_binding_the_projects_channel_later_lets_its_client_call_without_a_restart(
    stack: Stack, admin: httpx.AsyncClient
) -> None:
    project_id = await project_bound_to(admin)
    client = await client_of(admin, project_id)
    assert (await embed(stack, client["key"])).status_code == 403
    await posted(admin, f"/projects/{project_id}/channels", {"capability": EMBEDDING})
    response = await embed(stack, client["key"])
    assert response.status_code == 200, response.text


async def test_models_lists_only_what_a_bound_key_may_call(stack: Stack, admin: httpx.AsyncClient) -> None:
    client = await client_of(admin, await project_bound_to(admin, EMBEDDING))
    async with httpx.AsyncClient(timeout=60) as http:
        response = await http.get(
            f"{stack.gateway.url}/v1/models", headers={"authorization": f"Bearer {client['key']}"}
        )
    assert response.status_code == 200, response.text
    assert [model["capability"] for model in response.json()["data"]] == [EMBEDDING]


async def test_a_client_created_with_a_project_is_listed_among_its_clients_as_a_bound_one_is(
    stack: Stack, admin: httpx.AsyncClient
) -> None:
    project_id = await project_bound_to(admin, EMBEDDING)
    created = clients(
        stack.nats_url,
        "create",
        "--name",
        f"cli-{new_id()[:8]}",
        "--scope",
        EMBEDDING,
        "--project",
        project_id,
    )
    assert created.returncode == 0, created.stderr
    found = re.search(r"client\s+(cl_\S+)", created.stdout)
    assert found
    created_with = await ClientService(stack.store).get(found.group(1))
    assert created_with is not None
    assert stack.gateway.replica is not None
    await stack.gateway.replica.edge.directory.wait_until_applied(created_with.version, timeout=5)
    bound_later = await posted(admin, "/clients", {"name": f"later-{new_id()[:8]}", "scopes": [EMBEDDING]})
    await posted(admin, f"/projects/{project_id}/clients", {"client_id": bound_later["client_id"]})

    projects = (await admin.get("/projects")).json()
    (project,) = [p for p in projects if p["project_id"] == project_id]
    assert sorted(project["clients"]) == sorted([created_with.client_id, bound_later["client_id"]])
    listed = {c["client_id"]: c["project_id"] for c in (await admin.get("/clients")).json()}
    assert listed[created_with.client_id] == listed[bound_later["client_id"]] == project_id
