"""Named operator keys on a real gateway: the key says who acts, so a production approval records
the key's operator, whatever name the request declares; a removed operator's key stops working at
the next request, with no restart."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway.operators import OperatorFile, add_operator, remove_operator
from tests.integration.promotion.conftest import Stack, lab_ready_candidate, production_approval

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def operators(stack: Stack, tmp_path: Path) -> Iterator[Path]:
    assert stack.gateway.replica is not None
    path = tmp_path / "operators"
    edge = stack.gateway.replica.edge
    edge.operators = OperatorFile(path)
    yield path
    edge.operators = OperatorFile(None)


def as_operator(stack: Stack, key: str, declared: str = "") -> httpx.AsyncClient:
    headers = {"authorization": f"Bearer {key}", **({"x-mf-operator": declared} if declared else {})}
    return httpx.AsyncClient(base_url=f"{stack.gateway.url}/admin/v1", headers=headers, timeout=120)


async def test_a_production_approval_records_the_operator_whose_key_approved_it(
    stack: Stack, operators: Path, minilm_source: Path
) -> None:
    candidate = await lab_ready_candidate(stack, minilm_source, "named-approver")
    key = add_operator(operators, "alice")
    async with as_operator(stack, key, declared="mallory") as alice:
        response = await alice.post(
            "/approvals/production", json=production_approval(candidate["candidate_id"])
        )
    assert response.status_code == 200, response.text
    assert response.json()["approved_by"] == "alice"


async def test_a_removed_operators_key_is_refused_at_the_next_request(stack: Stack, operators: Path) -> None:
    key = add_operator(operators, "bob")
    async with as_operator(stack, key) as bob:
        assert (await bob.get("/nodes")).status_code == 200
        remove_operator(operators, "bob")
        refused = await bob.get("/nodes")
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "CAPABILITY_NOT_AUTHORIZED"


async def test_an_unknown_key_is_refused_beside_named_operators(stack: Stack, operators: Path) -> None:
    add_operator(operators, "carol")
    async with as_operator(stack, "mfo_not-a-key") as stranger:
        assert (await stranger.get("/nodes")).status_code == 401
