"""`POST /v1/rerank` served by the real MiniLM as a bi-encoder (what `modelforge up` serves), through
the `cohere` package unchanged: an obviously relevant document ranks first, and `/v1/models` names
the model for what it is."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import cohere
import httpx
import pytest

from modelforge.devstack.nats_server import NatsServer
from nodeagent.models.pull import minilm_biencoder_rerank_config, pull_minilm
from tests.integration.gateway.conftest import ModelStack, one_model_stack

MODEL = "minilm-biencoder-rerank"
DOCUMENTS = [
    "The central bank raised interest rates by a quarter point.",
    "Preheat the oven to 200 degrees and bake the bread for forty minutes.",
    "The striker scored twice in the second half to win the match.",
    "Python lists can be sorted in place with the sort method.",
    "Cats sleep for up to sixteen hours a day.",
]
QUERIES = [
    ("How long do cats sleep?", 4),
    ("How do I sort a list in Python?", 3),
    ("Who won the football game?", 2),
    ("What temperature should I bake bread at?", 1),
    ("What did the central bank do to rates?", 0),
]


@pytest.fixture(scope="module")
async def biencoder_stack(
    module_nats: NatsServer, minilm_root: Path, scratch: Path
) -> AsyncIterator[ModelStack]:
    pull_minilm(minilm_root / MODEL, install_missing=False, serving_config=minilm_biencoder_rerank_config)
    async with one_model_stack(module_nats.url, minilm_root, scratch, MODEL, "rag.reranking@1") as stack:
        yield stack


async def test_the_cohere_client_gets_the_obviously_relevant_document_first(
    biencoder_stack: ModelStack,
) -> None:
    client = cohere.AsyncClientV2(api_key=biencoder_stack.key, base_url=biencoder_stack.url)
    for query, relevant in QUERIES:
        response = await client.rerank(model=MODEL, query=query, documents=DOCUMENTS, top_n=2)
        assert response.results[0].index == relevant, query
        assert -1.0 <= response.results[1].relevance_score < response.results[0].relevance_score <= 1.0


async def test_models_names_the_reranker_a_bi_encoder(biencoder_stack: ModelStack) -> None:
    async with httpx.AsyncClient(timeout=60) as http:
        listed = await http.get(
            f"{biencoder_stack.url}/v1/models", headers={"authorization": f"Bearer {biencoder_stack.key}"}
        )
    (entry,) = [m for m in listed.json()["data"] if m["capability"] == "rag.reranking@1"]
    assert entry["id"] == MODEL
    assert entry["available"] is True
