"""Real answers are what the OpenAPI document says they are: each decodes into the type its
response schema is generated from, with no field the type leaves out. (Rerank, OCR and
transcription answers: in their own modules, which have those models.)"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from gateway.http import answers as a
from streams.contracts import EmbeddingOutput
from tests.integration.gateway.conftest import SHARES_THE_STACK, Stack
from tests.support.answers import conforms

pytestmark = SHARES_THE_STACK


async def get(stack: Stack, path: str) -> Any:
    async with httpx.AsyncClient(base_url=stack.gateway.url, timeout=60) as http:
        return (await http.get(path, headers={"authorization": f"Bearer {stack.key.key}"})).json()


async def post(stack: Stack, path: str, body: object) -> Any:
    async with httpx.AsyncClient(base_url=stack.gateway.url, timeout=60) as http:
        return (await http.post(path, json=body, headers={"authorization": f"Bearer {stack.key.key}"})).json()


@pytest.mark.parametrize("encoding", ["float", "base64"])
async def test_an_embeddings_answer_is_an_embedding_answer(stack: Stack, encoding: str) -> None:
    conforms(
        await post(stack, "/v1/embeddings", {"input": ["a", "b"], "encoding_format": encoding}),
        a.EmbeddingAnswer,
    )


async def test_a_native_answer_is_an_invoke_answer_of_the_contracts_output(stack: Stack) -> None:
    body = await post(stack, "/v1/capabilities/rag.embedding@1:invoke", {"texts": ["a"]})
    conforms(body, a.InvokeAnswer[EmbeddingOutput])


async def test_the_model_list_and_one_model_are_as_described(stack: Stack) -> None:
    listed = await get(stack, "/v1/models")
    conforms(listed, a.ModelList)
    conforms(await get(stack, f"/v1/models/{listed['data'][0]['id']}"), a.ModelEntry)


async def test_health_and_readiness_are_as_described(stack: Stack) -> None:
    conforms(await get(stack, "/healthz"), a.Health)
    conforms(await get(stack, "/readyz"), a.Readiness)


async def test_a_refusal_is_an_error_body(stack: Stack) -> None:
    body = await post(stack, "/v1/embeddings", {"input": 1})
    conforms(body, a.ErrorBody)
    conforms(body["error"], a.ErrorDetail)
