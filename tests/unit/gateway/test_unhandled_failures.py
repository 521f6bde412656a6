"""A handler that fails with no code of its own still answers in the one error shape, stamped like
every response, and the log shows where it failed but never the failure's message (which may quote
the request's content)."""

from __future__ import annotations

import logging

import httpx
import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.http.stamps import ResponseStamps
from streams.redaction import fault_summary

SECRET = "the client's secret sentence"


async def failing(request: Request) -> Response:
    return Response(str(int((await request.body()).decode())))  # ValueError naming the body


def app() -> Starlette:
    return Starlette(
        routes=[Route("/fail", failing, methods=["POST"])], middleware=[Middleware(ResponseStamps)]
    )


async def test_an_unhandled_failure_is_a_stamped_500_in_the_one_error_shape(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR)
    transport = httpx.ASGITransport(app=app())
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as http:
        response = await http.post("/fail", content=SECRET)
    assert response.status_code == 500
    error = response.json()["error"]
    assert (error["code"], error["type"]) == ("INTERNAL_ERROR", "server_error")
    assert error["request_id"] == response.headers["x-request-id"]
    assert "ValueError" in error["message"]
    assert SECRET not in response.text
    assert float(response.headers["x-mf-latency-ms"]) >= 0
    assert "POST /fail failed: ValueError" in caplog.text
    assert "in failing" in caplog.text  # where it failed
    assert SECRET not in caplog.text


def test_a_fault_summary_names_the_type_and_the_frames_but_not_the_message() -> None:
    try:
        int(SECRET)
    except ValueError as error:
        summary = fault_summary(error)
    assert summary.startswith("ValueError (message withheld")
    assert "int(SECRET)" in summary  # the source line, as a traceback shows it
    assert SECRET not in summary
