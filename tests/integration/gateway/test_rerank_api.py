"""`POST /v1/rerank` through the whole system, in the Cohere and Jina dialects, with the `cohere`
package unchanged. The model is a small cross-encoder the tests build (no reranker ships in a
wheel): its score counts cat words in the document, so the right order is known."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import cohere
import httpx
import pytest

from gateway.http.answers import RerankAnswer
from modelforge.devstack.nats_server import NatsServer
from tests.integration.gateway.conftest import ModelStack, one_model_stack, refused_leaving_no_trace
from tests.support.agents import MINILM
from tests.support.answers import conforms
from tests.support.models import write_tiny_cross_encoder

DOCUMENTS = ["Stocks fell today.", "A cat and a kitten.", "The weather is mild.", "My cat sleeps."]


@pytest.fixture(scope="module")
async def rerank_stack(
    module_nats: NatsServer, minilm_root: Path, scratch: Path
) -> AsyncIterator[ModelStack]:
    folder = minilm_root / "tiny-reranker"
    if not folder.exists():
        folder.mkdir()
        shutil.copy(minilm_root / MINILM / "tokenizer.json", folder / "tokenizer.json")
        write_tiny_cross_encoder(folder / "model.onnx", folder / "tokenizer.json")
        (folder / "serving_config.json").write_text('{"capability": "rag.reranking@1"}')
    async with one_model_stack(
        module_nats.url, minilm_root, scratch, "tiny-reranker", "rag.reranking@1"
    ) as stack:
        yield stack


async def test_the_cohere_client_gets_documents_ranked_by_relevance(rerank_stack: ModelStack) -> None:
    client = cohere.AsyncClientV2(api_key=rerank_stack.key, base_url=rerank_stack.url)
    response = await client.rerank(model="tiny-reranker", query="cats", documents=DOCUMENTS, top_n=2)
    assert [r.index for r in response.results] == [1, 3]
    assert response.results[0].relevance_score > response.results[1].relevance_score


async def test_jina_style_documents_and_texts_alias_with_returned_documents(
    rerank_stack: ModelStack,
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


async def _rerank(stack: ModelStack, body: dict[str, object], path: str = "/v1/rerank") -> httpx.Response:
    async with httpx.AsyncClient(timeout=60) as http:
        response = await http.post(
            f"{stack.url}{path}", json=body, headers={"authorization": f"Bearer {stack.key}"}
        )
    assert response.status_code == 200, response.text
    return response


async def test_the_cohere_v1_client_gets_the_documents_back_when_it_asks(rerank_stack: ModelStack) -> None:
    client = cohere.AsyncClient(api_key=rerank_stack.key, base_url=rerank_stack.url)
    response = await client.rerank(
        model="tiny-reranker", query="cats", documents=DOCUMENTS, top_n=3, return_documents=True
    )
    assert [(r.index, r.document.text if r.document else None) for r in response.results] == [
        (1, "A cat and a kitten."),
        (3, "My cat sleeps."),
        (0, "Stocks fell today."),
    ]


async def test_a_top_n_past_the_documents_returns_them_all_best_first(rerank_stack: ModelStack) -> None:
    response = await _rerank(rerank_stack, {"query": "cats", "documents": DOCUMENTS, "top_n": 50})
    assert [r["index"] for r in response.json()["results"]] == [1, 3, 0, 2]


async def test_equal_scores_keep_the_documents_order(rerank_stack: ModelStack) -> None:
    documents = ["A dog.", "One cat.", "Two birds.", "Another cat.", "A third cat.", "Fish."]
    response = await _rerank(rerank_stack, {"query": "cats", "documents": documents})
    results = response.json()["results"]
    assert [r["index"] for r in results] == [1, 3, 4, 0, 2, 5]
    scores = [r["relevance_score"] for r in results]
    assert scores[0] == scores[1] == scores[2] > scores[3] == scores[4] == scores[5]


async def test_nulls_and_fields_of_other_rerank_apis_are_accepted(rerank_stack: ModelStack) -> None:
    body = {
        "model": None,
        "query": "cats",
        "documents": [{"text": d, "title": "t"} for d in DOCUMENTS],
        "top_n": None,
        "return_documents": None,
        "rank_fields": ["text"],
        "max_tokens_per_doc": 512,
        "max_chunks_per_doc": 10,
    }
    response = (await _rerank(rerank_stack, body)).json()
    assert [r["index"] for r in response["results"]] == [1, 3, 0, 2]
    assert "document" not in response["results"][0]
    assert response["model"] == "tiny-reranker"
    assert response["usage"]["total_tokens"] == response["usage"]["prompt_tokens"] > 0


async def test_the_native_contract_reranks_as_the_dialects_do(rerank_stack: ModelStack) -> None:
    response = await _rerank(
        rerank_stack,
        {"query": "cats", "documents": DOCUMENTS, "top_n": 9},
        "/v1/capabilities/rag.reranking@1:invoke",
    )
    assert [r["index"] for r in response.json()["output"]["results"]] == [1, 3, 0, 2]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"query": "cats"}, "documents"),
        ({"query": "  ", "documents": ["x"]}, "query"),
        ({"documents": ["x"]}, None),
        ({"query": 5, "documents": ["x"]}, "query"),
        ({"query": "cats", "documents": []}, "documents"),
        ({"query": "cats", "documents": ["x", " "]}, "documents"),
        ({"query": "cats", "documents": ["x"], "top_n": 0}, "top_n"),
        ({"query": "cats", "documents": ["x"], "top_n": -3}, "top_n"),
        ({"query": "cats", "documents": ["x"], "top_n": "2"}, "top_n"),
        ({"query": "cats", "documents": [5]}, "documents"),
        ({"query": "cats", "documents": [{"title": "no text"}]}, "documents"),
        ({"query": "cats", "texts": [{"text": "objects are for documents"}]}, "texts"),
        ({"query": "cats", "documents": ["x"], "return_documents": "yes"}, "return_documents"),
    ],
)
async def test_bad_rerank_requests_are_refused_and_leave_no_trace(
    rerank_stack: ModelStack, body: dict[str, object], param: str | None
) -> None:
    response = await refused_leaving_no_trace(
        rerank_stack.connection, rerank_stack.gateway, "/v1/rerank", rerank_stack.key, body
    )
    assert response.status_code == 422
    error = response.json()["error"]
    assert (error["code"], error["param"]) == ("INVALID_INPUT", param)


async def test_a_rerank_answer_is_as_the_openapi_document_says(rerank_stack: ModelStack) -> None:
    body = {"query": "cats", "documents": DOCUMENTS, "return_documents": True}
    for path in ("/v1/rerank", "/v2/rerank"):
        conforms((await _rerank(rerank_stack, body, path)).json(), RerankAnswer)
