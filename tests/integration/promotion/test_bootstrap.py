"""`bootstrap_demo` drives the whole pipeline through the admin API; a second run changes nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from gateway.admin.bootstrap import bootstrap_demo
from tests.integration.promotion.conftest import TOKEN, Stack

pytestmark = pytest.mark.timeout(300)


async def test_bootstrap_promotes_the_demo_and_a_second_run_changes_nothing(
    stack: Stack, minilm_source: Path
) -> None:
    first = await asyncio.to_thread(
        bootstrap_demo,
        stack.gateway.url,
        TOKEN,
        stack.artifact_root,
        stack.node,
        sources=minilm_source.parent,
    )
    assert first["key"], first
    assert first["deployment_status"] == "stable"
    async with httpx.AsyncClient(base_url=stack.gateway.url, timeout=60) as http:
        response = await http.post(
            "/v1/embeddings",
            json={"input": "a first request"},
            headers={"authorization": f"Bearer {first['key']}"},
        )
    assert response.status_code == 200, response.text
    await stack.gateway.settled()
    head = await stack.events_head()
    second = await asyncio.to_thread(
        bootstrap_demo,
        stack.gateway.url,
        TOKEN,
        stack.artifact_root,
        stack.node,
        sources=minilm_source.parent,
    )
    assert second["deployment_id"] == first["deployment_id"]
    assert second["key"] is None
    assert second["steps"] == []
    assert await stack.events_head() == head


async def test_bootstrap_after_the_demo_was_drained_says_so_and_promotes_nothing(
    stack: Stack, minilm_source: Path
) -> None:
    def run() -> dict[str, object]:
        return bootstrap_demo(
            stack.gateway.url, TOKEN, stack.artifact_root, stack.node, sources=minilm_source.parent
        )

    demo = await asyncio.to_thread(run)
    await stack.post(f"/deployments/{demo['deployment_id']}/drain", {"reason": "replaced"})
    again = await asyncio.to_thread(run)
    assert again["deployment_id"] == demo["deployment_id"]
    assert again["deployment_status"] == "drained"
    assert again["steps"] == []
