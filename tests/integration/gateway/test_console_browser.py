"""The operator console in headless Chromium against the real stack (an agent serving MiniLM, a
gateway, a projector filling a fresh read model): after some traffic the overview shows the
accelerator's memory bar, the deployment, the traffic charts and the client by name, with no
console error and nothing scrolling sideways at 1400 px. A screenshot is kept as an artefact."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from streams import subjects
from streams.events.requests import RequestCompleted
from tests.integration.gateway.conftest import SHARES_THE_STACK, Stack, stack_admin
from tests.integration.projections.helpers import migrated, projecting
from tests.support.browser import artefacts, chromium, log_in, needs_chromium, shown
from tests.support.serving import InProcessGateway, events_until

pytestmark = SHARES_THE_STACK

TOKEN = "console-operator-token"
WIDTH = 1400
# What the overview shows once the read model has the traffic: a memory bar, the deployment's
# health, bars in a traffic chart, a request in the history and the read model's standing.
SHOWN = (
    "#accelerators .membar .part.resident, #deployments td.health-ok, #traffic svg.chart rect.ok,"
    " #requests td.number, #projection td.number"
)


@contextlib.asynccontextmanager
async def console_gateway(stack: Stack) -> AsyncIterator[InProcessGateway]:
    """A gateway of its own on the stack's NATS (reading the DATABASE_URL set), with TOKEN."""
    gateway = InProcessGateway()
    await gateway.start(stack.nats_url)
    try:
        assert gateway.replica is not None
        gateway.replica.edge.operator_token = TOKEN
        live = gateway.replica.edge.ctx.live
        assert await live.wait_for(lambda: live.node_live(stack.node), 30)
        yield gateway
    finally:
        await gateway.stop()


# Each tab in turn: click it, wait (on the body's data-loaded attribute, set once its read is
# drawn) and note how much wider than the window (less any scrollbar) the page became.
EVERY_TAB = """(async () => {
  const widths = {};
  for (const button of document.querySelectorAll("nav button")) {
    button.click();
    await new Promise((resolve) => {
      const done = () => document.body.dataset.loaded === button.dataset.name;
      if (done()) return resolve();
      new MutationObserver((_, observer) => { if (done()) { observer.disconnect(); resolve(); } })
        .observe(document.body, { attributes: true, attributeFilter: ["data-loaded"] });
    });
    const page = document.documentElement;
    widths[button.dataset.name] = page.scrollWidth - page.clientWidth;
  }
  return widths;
})()"""


@needs_chromium
async def test_the_console_shows_the_fleet_and_its_traffic_without_errors_or_sideways_scrolling(
    stack: Stack, fresh_database: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    await migrated(fresh_database)
    monkeypatch.setenv("DATABASE_URL", fresh_database)
    async with projecting(fresh_database, stack.nats_url), console_gateway(stack) as gateway:
        headers = {"authorization": f"Bearer {stack.key.key}"}
        async with httpx.AsyncClient(base_url=gateway.url, headers=headers, timeout=60) as http:
            for n in range(4):
                served = await http.post("/v1/embeddings", json={"input": f"sentence {n}"})
                assert served.status_code == 200, served.text
            refused = await http.post("/v1/embeddings", json={})
            assert refused.status_code == 422
            clients = await http.get("/admin/v1/clients", headers={"authorization": f"Bearer {TOKEN}"})
        name = next(c["name"] for c in clients.json() if c["client_id"] == stack.key.client_id)

        async with chromium(tmp_path / "profile") as browser:
            page = await browser.new_page()
            await page.open(f"{gateway.url}/console", WIDTH, 1000)
            await log_in(page, TOKEN)
            assert await page.evaluate(shown(SHOWN), timeout=120)
            requests_text = await page.evaluate("document.getElementById('requests').textContent")
            overflow = await page.evaluate(
                "[document.documentElement.scrollWidth, document.documentElement.clientWidth, innerWidth]"
            )
            shot = await page.screenshot(artefacts(tmp_path) / "console-overview.png")
            tabs = await page.evaluate(EVERY_TAB, timeout=120)

    assert page.errors == []
    assert name in requests_text  # clients by name,
    assert stack.key.client_id not in requests_text  # not by id
    scroll_width, client_width, window_width = overflow
    assert window_width == WIDTH
    assert scroll_width <= client_width, overflow  # nothing wider than the page (a scrollbar aside)
    assert len(tabs) >= 10
    assert {
        tab: width for tab, width in tabs.items() if width > client_width
    } == {}  # every tab read and fits
    assert shot.stat().st_size > 10_000


async def test_without_a_read_model_the_traffic_is_folded_from_the_request_log(stack: Stack) -> None:
    headers = {"authorization": f"Bearer {stack.key.key}"}
    async with httpx.AsyncClient(base_url=stack.gateway.url, headers=headers, timeout=60) as http:
        served = await http.post("/v1/embeddings", json={"input": "from the log"})
        assert served.status_code == 200, served.text
    request_id = served.headers["x-request-id"]
    await events_until(
        stack.connection,
        subjects.REQUESTS_STREAM,
        lambda e: isinstance(e, RequestCompleted) and e.request_id == request_id,
    )
    async with stack_admin(stack, TOKEN) as admin:
        answer = await admin.get("traffic", params={"window_s": 600, "step_s": 60})
    assert answer.status_code == 200, answer.text
    [embedding] = [c for c in answer.json()["capabilities"] if c["capability"] == "rag.embedding@1"]
    assert len(embedding["points"]) == 10
    assert embedding["requests"] >= 1
    assert any(p["p50_ms"] is not None for p in embedding["points"])  # completed ones have a latency
