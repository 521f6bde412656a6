"""The operator console: a static page whose script reads the admin API with the operator's token.
Its views are checked against a real gateway reading a real read model (every read answers), not
in a browser."""

from __future__ import annotations

import re

import httpx
import pytest

from gateway.admin import console
from gateway.admin.reads import STALE_HEADER
from modelforge.devstack.nats_server import NatsServer

from .helpers import projecting

SCRIPT = (console._ASSETS / "console.js").read_text()
SCRIPTS = {name: (console._ASSETS / name).read_text() for name in console._TYPES if name.endswith(".js")}


def view_paths() -> list[str]:
    return re.findall(r'path: "(/[^"]+)"', SCRIPT)


def anonymous(admin: httpx.AsyncClient) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=str(admin.base_url).removesuffix("/admin/v1/"))


async def test_the_console_page_loads_without_a_token_and_runs_only_its_own_assets(
    admin: httpx.AsyncClient,
) -> None:
    async with anonymous(admin) as browser:
        page = await browser.get("/console")
        script = await browser.get("/console/console.js")
        style = await browser.get("/console/console.css")
    assert page.status_code == script.status_code == style.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert script.headers["content-type"].startswith("text/javascript")
    assert style.headers["content-type"].startswith("text/css")
    policy = page.headers["content-security-policy"]
    for directive in ("default-src 'none'", "script-src 'self'", "connect-src 'self'"):
        assert directive in policy
    assert '<script src="/console/console.js"' in page.text
    assert "<script>" not in page.text  # no inline script: the policy would block it anyway
    assert page.headers["x-request-id"]


async def test_every_console_view_is_an_admin_read_that_answers_fresh(
    admin: httpx.AsyncClient, fresh_database: str, private_nats: NatsServer
) -> None:
    paths = view_paths()
    assert len(paths) >= 10, paths
    async with projecting(fresh_database, private_nats.url):
        for path in paths:
            response = await admin.get(path.removeprefix("/"))
            assert response.status_code == 200, (path, response.text)
            assert isinstance(response.json(), dict | list), path
            assert STALE_HEADER not in response.headers, path


async def test_the_console_shows_nothing_without_the_operator_token(admin: httpx.AsyncClient) -> None:
    async with anonymous(admin) as browser:
        for path in view_paths():
            response = await browser.get(f"/admin/v1{path}")
            assert response.status_code == 401, path
            assert response.json()["error"]["code"] == "CAPABILITY_NOT_AUTHORIZED"


def test_the_console_scripts_never_render_data_as_html() -> None:
    # Data from the API (client names, reasons) is set as text only: no HTML-parsing sinks.
    assert len(SCRIPTS) >= 2
    for name, script in SCRIPTS.items():
        for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "Function("):
            assert sink not in script, (name, sink)


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"step_s": "0"}, "step_s"),
        ({"window_s": "abc"}, "window_s"),
        ({"window_s": str(8 * 24 * 3600)}, "window_s"),
        ({"window_s": "86400", "step_s": "1"}, "step_s"),  # 86,400 points: more than a chart takes
    ],
)
async def test_a_traffic_window_the_console_cannot_draw_is_refused_naming_the_parameter(
    admin: httpx.AsyncClient, query: dict[str, str], field: str
) -> None:
    response = await admin.get("traffic", params=query)
    assert response.status_code == 422, response.text
    assert (response.json()["error"]["code"], response.json()["error"]["param"]) == ("INVALID_INPUT", field)


async def test_the_glance_reads_answer_empty_on_an_empty_fleet(
    admin: httpx.AsyncClient, fresh_database: str, private_nats: NatsServer
) -> None:
    async with projecting(fresh_database, private_nats.url):
        traffic = (await admin.get("traffic")).json()
        assert traffic["capabilities"] == []
        assert traffic["step_s"] == 60
        assert (await admin.get("fleet")).json() == []
        assert (await admin.get("scheduler/evictions")).json() == []
