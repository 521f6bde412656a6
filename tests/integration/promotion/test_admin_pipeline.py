"""From `artifact import` to the first successful client request, through the admin API only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.promotion.conftest import TOKEN, Stack, lab_ready_candidate, production_approval

pytestmark = pytest.mark.timeout(300)

_promoted: dict[str, Any] = {}


async def promoted(stack: Stack, source: Path) -> dict[str, Any]:
    if not _promoted:
        candidate = await lab_ready_candidate(stack, source, "minilm")
        approval = await stack.post("/approvals/production", production_approval(candidate["candidate_id"]))
        assert isinstance(approval, dict)
        deployment = await stack.post(
            "/deployments",
            {"candidate_id": candidate["candidate_id"], "approval_id": approval["approval_id"]},
        )
        assert isinstance(deployment, dict)
        _promoted.update(candidate=candidate, approval=approval, deployment=deployment)
    return _promoted


async def test_import_to_first_client_request(stack: Stack, minilm_source: Path) -> None:
    run = await promoted(stack, minilm_source)
    deployment = run["deployment"]
    assert deployment["channel"] == "stable"
    assert deployment["created"] is True
    assert deployment["embedding_space"]["dimension"] == 384
    assert deployment["envelope"]["required_bytes"] > 0  # measured by the probe
    client = await stack.post("/clients", {"name": "first-app", "scopes": ["rag.embedding@1"]})
    assert isinstance(client, dict)
    async with httpx.AsyncClient(base_url=stack.gateway.url, timeout=60) as http:
        response = await http.post(
            "/v1/embeddings",
            json={"input": ["hello world"], "model": "minilm"},
            headers={"authorization": f"Bearer {client['key']}"},
        )
    assert response.status_code == 200, response.text
    assert len(response.json()["data"][0]["embedding"]) == 384
    assert response.headers["x-mf-deployment"] == deployment["deployment_id"]


async def test_request_history_shows_the_latency_breakdown(stack: Stack, minilm_source: Path) -> None:
    await test_import_to_first_client_request(stack, minilm_source) if not _promoted else None
    history = await stack.get("/requests?limit=5")
    assert isinstance(history, list)
    completed = [r for r in history if r["status"] == "completed"]
    assert completed, history
    assert completed[0]["latency"]["total_ms"] > 0
    assert "input" not in completed[0]  # content never leaves the request


async def test_approving_the_same_facts_twice_returns_the_same_approval(
    stack: Stack, minilm_source: Path
) -> None:
    run = await promoted(stack, minilm_source)
    head = await stack.events_head()
    again = await stack.post("/approvals/production", production_approval(run["candidate"]["candidate_id"]))
    assert isinstance(again, dict)
    assert again["approval_id"] == run["approval"]["approval_id"]
    assert again["evidence_fingerprint"] == run["approval"]["evidence_fingerprint"]
    assert await stack.events_head() == head


async def test_promoting_the_same_approval_again_returns_the_deployment(
    stack: Stack, minilm_source: Path
) -> None:
    run = await promoted(stack, minilm_source)
    body = {"candidate_id": run["candidate"]["candidate_id"], "approval_id": run["approval"]["approval_id"]}
    again = await stack.post("/deployments", body)
    assert isinstance(again, dict)
    assert again["deployment_id"] == run["deployment"]["deployment_id"]
    assert again["created"] is False


async def test_admin_api_needs_the_operator_token(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.gateway.url) as http:
        response = await http.get("/admin/v1/deployments", headers={"authorization": "Bearer wrong"})
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "CAPABILITY_NOT_AUTHORIZED"


async def test_openapi_document_and_docs_are_served(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.gateway.url) as http:
        spec = (await http.get("/openapi.json")).json()
        docs = await http.get("/docs")
    assert "/admin/v1/deployments" in spec["paths"]
    assert "ImportArtifacts" in spec["components"]["schemas"]
    assert "/admin/v1/artifact-sets/import" in docs.text


async def test_contracts_list_the_five_capabilities(stack: Stack) -> None:
    contracts = await stack.get("/contracts")
    assert isinstance(contracts, list)
    assert len(contracts) == 5
    assert all(c["input_schema"] and c["output_schema"] for c in contracts)


async def test_the_production_approval_records_who_approved_and_why(
    stack: Stack, minilm_source: Path
) -> None:
    run = await promoted(stack, minilm_source)
    approval = await stack.get(f"/approvals/{run['approval']['approval_id']}")
    assert isinstance(approval, dict)
    assert (approval["approved_by"], approval["reason"]) == ("tests", "tests")  # the stack's x-mf-operator
    assert "MiniLM" in json.loads(approval["evidence"]["supply_chain"])["review"]


@pytest.mark.parametrize(
    ("changes", "headers", "missing"),
    [
        ({"supply_chain_review": ""}, {}, "supply_chain_review"),
        ({"supply_chain_review": "   "}, {}, "supply_chain_review"),
        ({"reason": ""}, {}, "reason"),
        ({}, {"x-mf-operator": ""}, "x-mf-operator"),
    ],
)
async def test_a_production_approval_without_its_review_reason_or_approver_is_refused(
    stack: Stack, minilm_source: Path, changes: dict[str, str], headers: dict[str, str], missing: str
) -> None:
    run = await promoted(stack, minilm_source)
    body = {**production_approval(run["candidate"]["candidate_id"]), **changes}
    head = await stack.events_head()
    response = await stack.admin.post("/admin/v1/approvals/production", json=body, headers=headers)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert (error["code"], error["param"]) == ("INVALID_INPUT", missing), error
    assert await stack.events_head() == head, "a refusal must change nothing"


async def test_a_production_approval_naming_no_operator_is_refused(stack: Stack, minilm_source: Path) -> None:
    run = await promoted(stack, minilm_source)
    async with httpx.AsyncClient(base_url=stack.gateway.url, timeout=60) as http:
        response = await http.post(
            "/admin/v1/approvals/production",
            json=production_approval(run["candidate"]["candidate_id"]),
            headers={"authorization": f"Bearer {TOKEN}"},
        )
    assert response.status_code == 422, response.text
    assert response.json()["error"]["param"] == "x-mf-operator"
