"""`POST /v1/embeddings`, OpenAI-compatible (the `openai` package, LangChain with
`check_embedding_ctx_length=False`)."""

from __future__ import annotations

import base64
from typing import Any, Literal

import msgspec
import numpy as np
from starlette.requests import Request
from starlette.responses import Response

from gateway.http.body import convert
from gateway.http.edge import Edge
from gateway.http.flow import Prepared, check_texts, run_capability
from gateway.serving.pipeline import Served
from streams.codes import ServingError
from streams.contracts import EMBEDDING, CapabilityContract, EmbeddingInput


class _Vectors(msgspec.Struct):
    """The agent's `EmbeddingOutput` with each vector left as JSON: float responses pass it through."""

    embeddings: list[msgspec.Raw]
    input_tokens: int = 0


_output = msgspec.json.Decoder(_Vectors)
_floats = msgspec.json.Decoder(list[float])


class OpenAIEmbeddingRequest(msgspec.Struct, frozen=True):
    input: str | list[str | int | list[int]]  # token ids are recognised to refuse them clearly
    model: str = ""
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None
    user: str | None = None


def parse_embeddings(edge: Edge) -> Any:
    def parse(raw: Any, contract: CapabilityContract) -> Prepared:
        call = convert(raw, OpenAIEmbeddingRequest, "embeddings request")
        texts = [call.input] if isinstance(call.input, str) else call.input
        if texts and not all(isinstance(t, str) for t in texts):
            raise ServingError(
                "INVALID_INPUT",
                "`input` holds token ids; this server embeds text. Send strings (with LangChain's "
                "OpenAIEmbeddings, set check_embedding_ctx_length=False).",
                param="input",
                http_status=400,
            )
        strings: list[str] = [t for t in texts if isinstance(t, str)]
        shape = check_texts(strings, contract, "input")
        _check_dimensions(edge, call)
        payload = msgspec.json.encode(EmbeddingInput(texts=strings, dimensions=call.dimensions))
        return Prepared(payload, shape, _render(call), call.model)

    return parse


def _check_dimensions(edge: Edge, call: OpenAIEmbeddingRequest) -> None:
    """Only the sizes the deployment the call routes to declares it may be truncated to."""
    dimensions = call.dimensions
    if dimensions is None:
        return
    deployment = edge.ctx.live.catalog.resolve(EMBEDDING.capability, call.model)
    space = deployment.embedding_space if deployment else None
    allowed = space.truncatable_dimensions if space else ()
    if dimensions not in allowed:
        supported = ", ".join(map(str, allowed)) or "none (this model's vectors cannot be truncated)"
        raise ServingError(
            "INVALID_INPUT",
            f"`dimensions` {dimensions} is not supported; supported: {supported}",
            param="dimensions",
            http_status=400,
        )


def _render(call: OpenAIEmbeddingRequest) -> Any:
    def render(result: bytes, served: Served, request_id: str) -> dict[str, object]:
        output = _output.decode(result)
        data: list[dict[str, object]] = []
        for index, vector in enumerate(output.embeddings):
            embedding: object = vector
            if call.encoding_format == "base64":
                floats = np.asarray(_floats.decode(vector), dtype="<f4")
                embedding = base64.b64encode(floats.tobytes()).decode()
            data.append({"object": "embedding", "index": index, "embedding": embedding})
        tokens = output.input_tokens
        return {
            "object": "list",
            "data": data,
            "model": call.model or served.model_name,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }

    return render


async def embeddings(request: Request) -> Response:
    edge: Edge = request.app.state.edge
    return await run_capability(edge, request, EMBEDDING, parse_embeddings(edge))
