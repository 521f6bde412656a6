"""`bootstrap_demo` drives the whole pipeline through the admin API; a second run changes nothing
(but adding what a home from before lacks: OCR and speech, and their scopes on the demo client)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from modelforge.devstack.bootstrap import EMBEDDING, OCR, RERANKING, SPEECH, bootstrap_demo
from tests.integration.promotion.conftest import TOKEN, Stack

pytestmark = pytest.mark.timeout(300)


async def test_bootstrap_promotes_the_demo_adds_ocr_later_and_a_further_run_changes_nothing(
    stack: Stack, minilm_source: Path
) -> None:
    def run(optional: tuple[str, ...]) -> dict[str, Any]:
        return bootstrap_demo(
            stack.gateway.url, TOKEN, stack.artifact_root, stack.node, sources=minilm_source.parent,
            optional=optional,
        )  # fmt: skip

    first = await asyncio.to_thread(run, (RERANKING,))  # a home from before the demo served OCR
    assert first["key"], first
    assert first["deployment_status"] == "stable"
    assert first["served"][RERANKING]["model"] == "minilm-biencoder-rerank"
    assert OCR not in first["served"]
    async with httpx.AsyncClient(base_url=stack.gateway.url, timeout=60) as http:
        response = await http.post(
            "/v1/embeddings",
            json={"input": "a first request"},
            headers={"authorization": f"Bearer {first['key']}"},
        )
    assert response.status_code == 200, response.text
    upgraded = await asyncio.to_thread(run, (RERANKING, OCR, SPEECH))
    assert upgraded["deployment_id"] == first["deployment_id"]
    assert upgraded["served"][OCR]["deployment_status"] == "stable", upgraded
    assert upgraded["key"] is None
    assert upgraded["served"][SPEECH]["model"] == "whisper-tiny.en"
    assert upgraded["steps"][-1] == f"gave the demo client the scope {OCR}, {SPEECH}"
    clients = await stack.get("/clients")
    assert isinstance(clients, list)
    assert sorted(next(c["scopes"] for c in clients if c["name"] == "demo")) == [
        OCR,
        EMBEDDING,
        RERANKING,
        SPEECH,
    ]
    await stack.gateway.settled()
    head = await stack.events_head()
    again = await asyncio.to_thread(run, (RERANKING, OCR, SPEECH))
    assert again["served"] == upgraded["served"]
    assert again["key"] is None
    assert again["steps"] == []
    assert await stack.events_head() == head


async def test_bootstrap_after_the_demo_was_drained_says_so_and_promotes_nothing(
    stack: Stack, minilm_source: Path
) -> None:
    def run() -> dict[str, object]:
        return bootstrap_demo(
            stack.gateway.url,
            TOKEN,
            stack.artifact_root,
            stack.node,
            sources=minilm_source.parent,
            optional=(),
        )

    demo = await asyncio.to_thread(run)
    await stack.post(f"/deployments/{demo['deployment_id']}/drain", {"reason": "replaced"})
    again = await asyncio.to_thread(run)
    assert again["deployment_id"] == demo["deployment_id"]
    assert again["deployment_status"] == "drained"
    assert again["steps"] == []
