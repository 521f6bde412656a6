"""Every gateway response names its request and its server time, whichever route answered."""

from __future__ import annotations

import httpx
import pytest

from tests.integration.gateway.conftest import Stack

ROUTES = [  # (method, path, body, authorised, expected status)
    ("POST", "/v1/embeddings", {"input": "hello", "model": "m"}, True, 200),
    ("POST", "/v1/embeddings", {"input": 42}, True, 422),
    ("GET", "/v1/models", None, False, 401),
    ("POST", "/v1/capabilities/no.such@1:invoke", {}, True, 404),
    ("GET", "/no/such/route", None, False, 404),
    ("GET", "/healthz", None, False, 200),
]


@pytest.mark.parametrize(
    ("method", "path", "body", "authorised", "status"), ROUTES, ids=[f"{r[1]}-{r[4]}" for r in ROUTES]
)
async def test_every_response_carries_a_request_id_and_its_server_time(
    stack: Stack, method: str, path: str, body: object, authorised: bool, status: int
) -> None:
    headers = {"authorization": f"Bearer {stack.key.key}"} if authorised else {}
    async with httpx.AsyncClient() as http:
        response = await http.request(method, f"{stack.gateway.url}{path}", json=body, headers=headers)
    assert response.status_code == status, response.text
    assert response.headers["x-request-id"]
    assert float(response.headers["x-mf-latency-ms"]) > 0
    assert "total;dur=" in response.headers["server-timing"]


async def _refused_with_request_id(stack: Stack, sent: str | bytes) -> httpx.Response:
    async with httpx.AsyncClient() as http:
        return await http.get(f"{stack.gateway.url}/v1/models", headers={"x-request-id": sent})


async def test_a_client_request_id_that_is_a_plain_token_names_the_request(stack: Stack) -> None:
    response = await _refused_with_request_id(stack, "client:retry-7.a_b")
    assert response.headers["x-request-id"] == "client:retry-7.a_b"
    assert response.json()["error"]["request_id"] == "client:retry-7.a_b"


@pytest.mark.parametrize("sent", [b"has space", b"x" * 129, b"semi;colon", "\u00fcn\u00efcode".encode()])
async def test_any_other_client_request_id_is_replaced_by_a_new_one(stack: Stack, sent: bytes) -> None:
    response = await _refused_with_request_id(stack, sent)
    assert response.headers["x-request-id"] not in ("", sent.decode("latin-1"))
    assert response.json()["error"]["request_id"] == response.headers["x-request-id"]
