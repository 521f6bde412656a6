"""`POST /v1/rerank`, Cohere- and Jina-compatible (`texts` is accepted for `documents`)."""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from gateway.http.body import convert
from gateway.http.edge import Edge
from gateway.http.flow import Prepared, check_texts, run_capability
from gateway.serving.pipeline import Served
from streams.codes import ServingError
from streams.contracts import RERANKING, CapabilityContract, RerankInput, RerankOutput

_output = msgspec.json.Decoder(RerankOutput)


class TextDocument(msgspec.Struct, frozen=True):
    text: str


class RerankRequest(msgspec.Struct, frozen=True):
    query: str
    documents: list[str | TextDocument] | None = None
    texts: list[str] | None = None
    top_n: int | None = None
    return_documents: bool = False
    model: str = ""
    max_chunks_per_doc: int | None = None


def parse_rerank(raw: Any, contract: CapabilityContract) -> Prepared:
    call = convert(raw, RerankRequest, "rerank request")
    documents = call.documents if call.documents is not None else call.texts
    if documents is None:
        raise ServingError("INVALID_INPUT", "`documents` is required", param="documents")
    texts = [d if isinstance(d, str) else d.text for d in documents]
    if not call.query.strip():
        raise ServingError("INVALID_INPUT", "`query` must not be empty", param="query")
    shape = check_texts(texts, contract, "documents")
    if call.top_n is not None and call.top_n < 1:
        raise ServingError("INVALID_INPUT", "`top_n` must be at least 1", param="top_n")
    payload = msgspec.json.encode(RerankInput(query=call.query, documents=texts, top_n=call.top_n))
    return Prepared(payload, shape, _render(call, texts), call.model)


def _render(call: RerankRequest, texts: list[str]) -> Any:
    def render(result: bytes, served: Served, request_id: str) -> dict[str, object]:
        output = _output.decode(result)
        results: list[dict[str, object]] = []
        for ranked in output.results:
            item: dict[str, object] = {"index": ranked.index, "relevance_score": ranked.relevance_score}
            if call.return_documents:
                item["document"] = {"text": texts[ranked.index]}
            results.append(item)
        tokens = output.input_tokens
        return {
            "id": request_id,
            "model": call.model or served.model_name,
            "results": results,
            "usage": {"total_tokens": tokens},
            "meta": {"billed_units": {"search_units": 1}},
        }

    return render


async def rerank(request: Request) -> Response:
    edge: Edge = request.app.state.edge
    return await run_capability(edge, request, RERANKING, parse_rerank)
