"""`POST /v1/rerank` (Cohere v1 and Jina) and `POST /v2/rerank` (Cohere v2): `documents` as strings
or `{"text": ...}` objects (`texts` is accepted for `documents`), `top_n` (more than there are
documents returns them all), `return_documents` (Cohere's default, off: Jina's clients read only the
index and score). Results are sorted best first; equal scores keep the documents' order."""

from __future__ import annotations

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from gateway.http.body import JsonValue, convert
from gateway.http.checks import check_rerank
from gateway.http.edge import Edge
from gateway.http.flow import Prepared, Render, Route, run_capability
from gateway.serving.requests import Served
from streams.codes import ServingError
from streams.contracts import RERANKING, CapabilityContract, RerankInput, RerankOutput

_output = msgspec.json.Decoder(RerankOutput)


class TextDocument(msgspec.Struct, frozen=True):
    text: str


class RerankRequest(msgspec.Struct, frozen=True):
    """Other fields clients send (`rank_fields`, `max_chunks_per_doc`, `max_tokens_per_doc`, …) are
    ignored, and null stands for "not given" in the optional ones."""

    query: str
    documents: list[str | TextDocument] | None = None
    texts: list[str] | None = None
    top_n: int | None = None
    return_documents: bool | None = None
    model: str | None = None


def parse_rerank(raw: JsonValue, contract: CapabilityContract, route: Route) -> Prepared:
    # (`route` unused: no check here depends on the deployment the call is served by)
    call = convert(raw, RerankRequest, "rerank request")
    documents = call.documents if call.documents is not None else call.texts
    if documents is None:
        raise ServingError("INVALID_INPUT", "`documents` is required", param="documents")
    texts = [d if isinstance(d, str) else d.text for d in documents]
    shape = check_rerank(call.query, texts, call.top_n, contract)
    payload = msgspec.json.encode(RerankInput(query=call.query, documents=texts, top_n=call.top_n))
    return Prepared(payload, shape, _render(call, texts), call.model or "")


def _render(call: RerankRequest, texts: list[str]) -> Render:
    def render(result: bytes, served: Served[bytes], request_id: str) -> dict[str, object]:
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
            "model": served.model_name,
            "results": results,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            "meta": {"billed_units": {"search_units": 1}},
        }

    return render


async def rerank(request: Request) -> Response:
    edge: Edge = request.app.state.edge
    return await run_capability(edge, request, RERANKING, parse_rerank)
