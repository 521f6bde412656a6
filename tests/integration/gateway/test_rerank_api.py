"""`POST /v1/rerank` through the whole system, in the Cohere and Jina dialects, with the `cohere`
package unchanged. The model is a small cross-encoder the tests build (no reranker ships in a
wheel): its score counts cat words in the document, so the right order is known."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import cohere
import httpx
import msgspec
import pytest

from eventstore.connection import connect
from eventstore.provision import provision
from eventstore.store import EventStore
from gateway.clients.service import ClientService
from modelforge.devstack.nats_server import NatsServer
from streams.envelope import new_id
from tests.support.agents import MINILM, AgentProcess
from tests.support.models import write_tiny_cross_encoder
from tests.support.serving import InProcessGateway, probe, promote, register_artifacts

DOCUMENTS = ["Stocks fell today.", "A cat and a kitten.", "The weather is mild.", "My cat sleeps."]


class RerankStack(msgspec.Struct):
    url: str
    key: str


@pytest.fixture(scope="module")
async def rerank_stack(
    module_nats: NatsServer, minilm_root: Path, scratch: Path
) -> AsyncIterator[RerankStack]:
    folder = minilm_root / "tiny-reranker"
    if not folder.exists():
        folder.mkdir()
        shutil.copy(minilm_root / MINILM / "tokenizer.json", folder / "tokenizer.json")
        write_tiny_cross_encoder(folder / "model.onnx", folder / "tokenizer.json")
        (folder / "serving_config.json").write_text('{"capability": "rag.reranking@1"}')
    connection = await connect(module_nats.url, "rerank-tests")
    await provision(connection.client)
    store = EventStore(connection)
    node = f"node-{new_id()[:6]}"
    agent = AgentProcess(module_nats.url, node, minilm_root, scratch)
    await agent.start(connection)
    artifacts = await register_artifacts(
        store, node, minilm_root, "tiny-reranker", capability="rag.reranking@1"
    )
    await promote(
        store, artifacts, await probe(connection, node, artifacts, minilm_root), model_name="tiny-reranker"
    )
    key = await ClientService(store).create(f"rr-{new_id()[:6]}", ["rag.reranking@1"])
    gateway = InProcessGateway()
    yield RerankStack(await gateway.start(module_nats.url), key.key)
    await gateway.stop()
    agent.stop()
    await connection.close()


async def test_the_cohere_client_gets_documents_ranked_by_relevance(rerank_stack: RerankStack) -> None:
    client = cohere.AsyncClientV2(api_key=rerank_stack.key, base_url=rerank_stack.url)
    response = await client.rerank(model="tiny-reranker", query="cats", documents=DOCUMENTS, top_n=2)
    assert [r.index for r in response.results] == [1, 3]
    assert response.results[0].relevance_score > response.results[1].relevance_score


async def test_jina_style_documents_and_texts_alias_with_returned_documents(
    rerank_stack: RerankStack,
) -> None:
    headers = {"authorization": f"Bearer {rerank_stack.key}"}
    async with httpx.AsyncClient(timeout=60) as http:
        objects = await http.post(
            f"{rerank_stack.url}/v1/rerank",
            headers=headers,
            json={"query": "cats", "documents": [{"text": d} for d in DOCUMENTS], "return_documents": True},
        )
        alias = await http.post(
            f"{rerank_stack.url}/v1/rerank", headers=headers, json={"query": "cats", "texts": DOCUMENTS}
        )
    results = objects.json()["results"]
    assert [r["index"] for r in results] == [1, 3, 0, 2]
    assert results[0]["document"] == {"text": "A cat and a kitten."}
    assert [r["index"] for r in alias.json()["results"]] == [1, 3, 0, 2]
    # Every pair is charged what the model was fed: query, document and the special tokens.
    tokens = objects.json()["usage"]["total_tokens"]
    assert tokens == alias.json()["usage"]["total_tokens"] > 3 * len(DOCUMENTS)


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"query": "cats"}, "INVALID_INPUT"),
        ({"query": "  ", "documents": ["x"]}, "INVALID_INPUT"),
        ({"query": "cats", "documents": []}, "INVALID_INPUT"),
        ({"query": "cats", "documents": ["x"], "top_n": 0}, "INVALID_INPUT"),
        ({"query": "cats", "documents": [5]}, "INVALID_INPUT"),
    ],
)
async def test_bad_rerank_requests_are_refused(
    rerank_stack: RerankStack, body: dict[str, object], code: str
) -> None:
    async with httpx.AsyncClient(timeout=60) as http:
        response = await http.post(
            f"{rerank_stack.url}/v1/rerank",
            json=body,
            headers={"authorization": f"Bearer {rerank_stack.key}"},
        )
    assert 400 <= response.status_code < 500
    assert response.json()["error"]["code"] == code
