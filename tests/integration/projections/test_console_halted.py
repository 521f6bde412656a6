"""A halted projection in the operator console, in headless Chromium: the projector really halts
(an event type it does not know, as after a gateway upgraded first) and the overview says so
plainly: the read-model panel names the stream, the sequence and the reason in words with the way
out, and a banner says the reads are stale, with no console error. A screenshot is kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from eventstore.store import EventStore
from gateway.contracts import register_contracts
from modelforge.devstack.nats_server import NatsServer
from streams.subjects import EVENTS_STREAM
from tests.support.browser import artefacts, chromium, log_in, needs_chromium, shown

from .conftest import TOKEN, admin_gateway
from .helpers import halted_by_an_unknown_event, migrated

# The read-model panel's halt, and the stale banner above the panels (the overview's first child).
HALTED = "#projection p.banner.error, #content > p.banner.error:first-child"


@needs_chromium
async def test_the_console_shows_a_halted_projection_its_reason_and_that_reads_are_stale(
    private_nats: NatsServer,
    private_store: EventStore,
    fresh_database: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    await register_contracts(private_store)
    await migrated(fresh_database)
    monkeypatch.setenv("DATABASE_URL", fresh_database)
    async with admin_gateway(private_nats.url) as (gateway, admin):
        assert (await admin.get("/scheduler/placements")).status_code == 200  # the gateway listens
        unknown = await halted_by_an_unknown_event(gateway, private_store, fresh_database, private_nats.url)

        async with chromium(tmp_path / "profile") as browser:
            page = await browser.new_page()
            await page.open(f"{gateway.url}/console", 1400, 1000)
            await log_in(page, TOKEN)
            assert await page.evaluate(shown(HALTED), timeout=120)
            halt = await page.evaluate("document.querySelector('#projection p.banner.error').textContent")
            stale = await page.evaluate("document.querySelector('#content > p.banner.error').textContent")
            rows = await page.evaluate("document.querySelector('#projection table').textContent")
            shot = await page.screenshot(artefacts(tmp_path) / "console-halted.png")

    assert page.errors == []
    assert f"Halted at {EVENTS_STREAM} sequence {unknown} (ClientTeleported)" in halt
    assert "unknown event type" in halt  # the reason, in words
    assert "start the projector again" in halt  # and the way out
    assert stale.startswith("The read model is stale")
    assert f"halted at {EVENTS_STREAM} sequence {unknown}" in stale
    assert f"{EVENTS_STREAM} (halted)" in rows  # its row too
    assert "1 event" in rows  # behind by the event it halted at
    assert shot.stat().st_size > 10_000
