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
    """What OpenAI's API takes; other fields clients send (`user`, vendor extensions) are ignored,
    and null stands for "not given" in the optional ones, as it does there."""

    input: str | list[str | int | list[int]]  # token ids are recognised to refuse them clearly
    model: str | None = None
    encoding_format: Literal["float", "base64"] | None = None  # not given: float
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
        if len(strings) > contract.limits.max_items:
            raise ServingError(
                "INVALID_INPUT",
                f"`input` has {len(strings)} items; at most {contract.limits.max_items} a request "
                f"(with LangChain's OpenAIEmbeddings, set chunk_size={contract.limits.max_items} or less)",
                param="input",
            )
        shape = check_texts(strings, contract, "input")
        model = call.model or ""
        dimensions = checked_dimensions(edge, model, call.dimensions)
        payload = msgspec.json.encode(EmbeddingInput(texts=strings, dimensions=dimensions))
        return Prepared(payload, shape, _render(call), model)

    return parse


def checked_dimensions(edge: Edge, model: str, dimensions: int | None) -> int | None:
    """The `dimensions` to ask the agent for: None for the vectors as they are (not asked for, or
    asked for at their full size), else one of the sizes the deployment the call routes to declares
    its vectors may be truncated to; any other is refused."""
    if dimensions is None:
        return None
    deployment = edge.ctx.live.catalog.resolve(EMBEDDING.capability, model)
    space = deployment.embedding_space if deployment else None
    if space is not None and dimensions == space.dimension:
        return None
    allowed = space.truncatable_dimensions if space else ()
    if dimensions in allowed:
        return dimensions
    if dimensions < 1:
        problem = f"`dimensions` must be a positive number of components, not {dimensions}"
    else:
        problem = f"`dimensions` {dimensions} is not supported"
    if space is None:
        supported = "leave `dimensions` out (no embedding space is declared for this model)"
    elif allowed:
        supported = f"supported: {', '.join(map(str, (*allowed, space.dimension)))}"
    else:
        supported = f"this model's vectors cannot be truncated; leave it out or send {space.dimension}"
    raise ServingError("INVALID_INPUT", f"{problem}; {supported}", param="dimensions", http_status=400)


def _render(call: OpenAIEmbeddingRequest) -> Any:
    model = call.model or ""

    def render(result: bytes, served: Served, request_id: str) -> dict[str, object]:
        output = _output.decode(result)
        data: list[dict[str, object]] = []
        for index, vector in enumerate(output.embeddings):
            embedding: object = vector
            if call.encoding_format == "base64":  # little-endian float32, as OpenAI sends it
                floats = np.asarray(_floats.decode(vector), dtype="<f4")
                embedding = base64.b64encode(floats.tobytes()).decode()
            data.append({"object": "embedding", "index": index, "embedding": embedding})
        tokens = output.input_tokens
        return {
            "object": "list",
            "data": data,
            "model": model or served.model_name,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }

    return render


async def embeddings(request: Request) -> Response:
    edge: Edge = request.app.state.edge
    return await run_capability(edge, request, EMBEDDING, parse_embeddings(edge))
