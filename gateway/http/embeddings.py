"""`POST /v1/embeddings`, OpenAI-compatible (the `openai` package, LangChain with
`check_embedding_ctx_length=False`), and Jina's image items (`gateway.http.image_inputs`), served by
`vision.embedding@1` in the same response shape."""

from __future__ import annotations

import base64
import sys
from array import array
from collections.abc import Sequence
from typing import Literal

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from gateway.http.body import JsonValue, convert
from gateway.http.checks import check_texts, checked_dimensions
from gateway.http.edge import Edge
from gateway.http.flow import ContractChoice, Parse, Prepared, Render, Route, run_capability
from gateway.http.image_inputs import InputObject, image_payload, is_image_request, object_text
from gateway.serving.outputs import Counted, Reply, StructOutput
from gateway.serving.requests import Served
from streams.codes import ServingError
from streams.contracts import EMBEDDING, VISION_EMBEDDING, CapabilityContract, EmbeddingInput


class _Vectors(Counted, kw_only=True):
    """The agent's `EmbeddingOutput` with each vector left as JSON: float responses pass it through."""

    embeddings: list[msgspec.Raw]


# (read along with the reply: its usage and its render take this one reading)
_VECTORS = StructOutput(msgspec.json.Decoder(Reply[_Vectors]))
_floats = msgspec.json.Decoder(list[float])


class OpenAIEmbeddingRequest(msgspec.Struct, frozen=True):
    """What OpenAI's API takes, and Jina's `{"text"}` / `{"image"}` items; other fields clients send
    (`user`, vendor extensions) are ignored, and null stands for "not given" in the optional ones,
    as it does there."""

    # token ids are recognised to refuse them clearly
    input: str | InputObject | list[str | int | list[int] | InputObject]
    model: str | None = None
    encoding_format: Literal["float", "base64"] | None = None  # not given: float
    dimensions: int | None = None
    user: str | None = None
    # query | document: for models that embed the two differently (NVIDIA's "passage" and
    # Cohere's "search_query" / "search_document" name the same two)
    input_type: str | None = None


_INPUT_TYPES = {
    "query": "query",
    "document": "document",
    "passage": "document",
    "search_query": "query",
    "search_document": "document",
}


def _input_type(call: OpenAIEmbeddingRequest) -> str:
    """The request's input type, "query" or "document" ("" when not given); INVALID_INPUT (422)
    naming `input_type` for any other."""
    if call.input_type is None:
        return ""
    kind = _INPUT_TYPES.get(call.input_type)
    if kind is None:
        raise ServingError(
            "INVALID_INPUT",
            f'`input_type` is "query" or "document" (or left out), not {call.input_type[:64]!r}',
            param="input_type",
        )
    return kind


def parse_embeddings(edge: Edge) -> Parse[JsonValue]:
    def parse(raw: JsonValue, contract: CapabilityContract, route: Route) -> Prepared:
        call = convert(raw, OpenAIEmbeddingRequest, "embeddings request")
        items = call.input if isinstance(call.input, list) else [call.input]
        model = call.model or ""
        if contract is VISION_EMBEDDING:
            payload, shape = image_payload(edge, items, route(model), call.dimensions)
            return Prepared(payload, shape, _render(call), model, output=_VECTORS)
        input_type = _input_type(call)
        if all(isinstance(t, str) for t in items):
            strings: list[str] = [t for t in items if isinstance(t, str)]
        else:
            strings = _texts_of(items)
        if len(strings) > contract.limits.max_items:
            raise ServingError(
                "INVALID_INPUT",
                f"`input` has {len(strings)} items; at most {contract.limits.max_items} a request "
                f"(with LangChain's OpenAIEmbeddings, set chunk_size={contract.limits.max_items} or less)",
                param="input",
            )
        shape = check_texts(strings, contract, "input")
        dimensions = checked_dimensions(edge, contract.capability, route(model), call.dimensions)
        payload = msgspec.json.encode(EmbeddingInput(texts=strings, dimensions=dimensions))
        return Prepared(payload, shape, _render(call), model, input_type=input_type, output=_VECTORS)

    return parse


def _texts_of(items: Sequence[str | int | list[int] | InputObject]) -> list[str]:
    """Strings and `{"text"}` objects as texts; token ids (or an image) refused, saying why."""
    texts: list[str] = []
    for index, item in enumerate(items):
        if isinstance(item, str):
            texts.append(item)
        elif isinstance(item, InputObject):
            texts.append(object_text(item, index))
        elif isinstance(item, int) and any(isinstance(other, str) for other in items):
            # not token ids (those are a list of numbers alone, or of such lists): a stray number
            raise ServingError(
                "INVALID_INPUT",
                f"`input[{index}]` is a number among texts; send every item as a string",
                param="input",
                http_status=400,
            )
        else:
            raise ServingError(
                "INVALID_INPUT",
                "`input` holds token ids; this server embeds text. Send strings (with LangChain's "
                "OpenAIEmbeddings, set check_embedding_ctx_length=False).",
                param="input",
                http_status=400,
            )
    return texts


def _little_endian_float32(values: list[float]) -> bytes:
    """The values as float32, little-endian (with the array module: numpy's import would cost the
    gateway ~50-100 ms of its start and ~10 MiB for this one use)."""
    floats = array("f", values)
    if sys.byteorder == "big":
        floats.byteswap()
    return floats.tobytes()


def _render(call: OpenAIEmbeddingRequest) -> Render:
    def render(output: _Vectors, served: Served[_Vectors], request_id: str) -> dict[str, object]:
        data: list[dict[str, object]] = []
        for index, vector in enumerate(output.embeddings):
            embedding: object = vector
            if call.encoding_format == "base64":  # little-endian float32, as OpenAI sends it
                embedding = base64.b64encode(_little_endian_float32(_floats.decode(vector))).decode()
            data.append({"object": "embedding", "index": index, "embedding": embedding})
        tokens = output.input_tokens
        return {
            "object": "list",
            "data": data,
            "model": served.model_name,  # the model that answered, as OpenAI names it
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }

    return render


def _contract_of(raw: object) -> CapabilityContract:
    return VISION_EMBEDDING if is_image_request(raw) else EMBEDDING


_TEXTS_OR_IMAGES = ContractChoice((EMBEDDING, VISION_EMBEDDING), _contract_of)


async def embeddings(request: Request) -> Response:
    edge: Edge = request.app.state.edge
    return await run_capability(edge, request, EMBEDDING, parse_embeddings(edge), choice=_TEXTS_OR_IMAGES)
