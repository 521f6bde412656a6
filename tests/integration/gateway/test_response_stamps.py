"""Every gateway response names its request and its server time, whichever route answered."""

from __future__ import annotations

import httpx
import pytest

from streams import subjects
from streams.events.requests import RequestCompleted
from tests.integration.gateway.conftest import SHARES_THE_STACK, Stack, first_event

pytestmark = SHARES_THE_STACK

ROUTES = [  # (method, path, body, authorised, expected status)
    ("POST", "/v1/embeddings", {"input": "hello", "model": "all-MiniLM-L6-v2"}, True, 200),
    ("POST", "/v1/embeddings", {"input": 42}, True, 422),
    ("GET", "/v1/models", None, False, 401),
    ("POST", "/v1/capabilities/no.such@1:invoke", {}, True, 404),
    ("GET", "/no/such/route", None, False, 404),
    ("GET", "/v1/embeddings", None, False, 405),
    ("GET", "/healthz", None, False, 200),
]


@pytest.mark.parametrize(
    ("method", "path", "body", "authorised", "status"), ROUTES, ids=[f"{r[1]}-{r[4]}" for r in ROUTES]
)
async def test_every_response_carries_a_request_id_and_its_server_time(
    stack: Stack, method: str, path: str, body: object, authorised: bool, status: int
) -> None:
    headers = {"authorization": f"Bearer {stack.key.key}"} if authorised else {}
    async with httpx.AsyncClient(timeout=60) as http:
        response = await http.request(method, f"{stack.gateway.url}{path}", json=body, headers=headers)
    assert response.status_code == status, response.text
    assert response.headers["x-request-id"]
    assert float(response.headers["x-mf-latency-ms"]) > 0
    assert "total;dur=" in response.headers["server-timing"]


@pytest.mark.parametrize(
    ("method", "path", "code", "status"),
    [("GET", "/no/such/route", "ROUTE_NOT_FOUND", 404), ("GET", "/v1/embeddings", "METHOD_NOT_ALLOWED", 405)],
)
async def test_a_path_or_method_no_route_takes_gets_the_one_error_shape(
    stack: Stack, method: str, path: str, code: str, status: int
) -> None:
    async with httpx.AsyncClient() as http:
        response = await http.request(method, f"{stack.gateway.url}{path}")
    assert response.status_code == status
    error = response.json()["error"]
    assert (error["code"], error["request_id"]) == (code, response.headers["x-request-id"])
    if status == 405:
        assert response.headers["allow"] == "POST"


async def test_a_missing_route_points_to_routes_that_exist(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.gateway.url) as http:
        message = (await http.get("/no/such/route")).json()["error"]["message"]
        assert "/openapi.json" in message
        assert "/v1/embeddings" in message
        assert (await http.get("/openapi.json")).status_code != 404


async def _models_refused(stack: Stack, headers: dict[str, str | bytes]) -> httpx.Response:
    async with httpx.AsyncClient() as http:
        return await http.get(f"{stack.gateway.url}/v1/models", headers=headers)


async def test_the_gateway_names_every_request_itself(stack: Stack) -> None:
    first = await _models_refused(stack, {"x-request-id": "chosen-by-client"})
    second = await _models_refused(stack, {"x-request-id": "chosen-by-client"})
    ids = {first.headers["x-request-id"], second.headers["x-request-id"]}
    assert len(ids) == 2
    assert "chosen-by-client" not in ids
    assert first.json()["error"]["request_id"] == first.headers["x-request-id"]


async def test_a_client_request_id_that_is_a_plain_token_is_echoed(stack: Stack) -> None:
    response = await _models_refused(stack, {"x-client-request-id": "client:retry-7.a_b"})
    assert response.headers["x-client-request-id"] == "client:retry-7.a_b"


@pytest.mark.parametrize("sent", [b"has space", b"x" * 129, b"semi;colon", "\u00fcn\u00efcode".encode()])
async def test_any_other_client_request_id_is_not_echoed(stack: Stack, sent: bytes) -> None:
    response = await _models_refused(stack, {"x-client-request-id": sent})
    assert "x-client-request-id" not in response.headers
    assert response.headers["x-request-id"]


async def test_with_nothing_exporting_a_response_still_names_the_callers_trace(stack: Stack) -> None:
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    async with httpx.AsyncClient() as http:
        response = await http.get(
            f"{stack.gateway.url}/healthz", headers={"traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"}
        )
    assert response.headers["x-trace-id"] == trace_id
    assert response.headers["traceresponse"].startswith(f"00-{trace_id}-")
    assert response.headers["traceresponse"].endswith("-01")


async def test_with_nothing_exporting_the_requests_events_still_record_its_trace_id(stack: Stack) -> None:
    trace_id = "0af7651916cd43dd8448eb211c80319c"
    async with httpx.AsyncClient(timeout=60) as http:
        response = await http.post(
            f"{stack.gateway.url}/v1/embeddings",
            json={"input": "hello"},
            headers={
                "authorization": f"Bearer {stack.key.key}",
                "traceparent": f"00-{trace_id}-b7ad6b7169203331-01",
            },
        )
    assert response.status_code == 200, response.text
    request_id = response.headers["x-request-id"]
    completed = await first_event(
        stack,
        subjects.REQUESTS_STREAM,
        lambda e: isinstance(e, RequestCompleted) and e.request_id == request_id,
    )
    assert isinstance(completed, RequestCompleted)
    assert completed.trace_id == trace_id
