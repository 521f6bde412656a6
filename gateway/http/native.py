"""`POST /v1/capabilities/{capability}:invoke`: the typed contract, as is.

The input is checked here as the dialects check theirs (limits, `dimensions` the deployment
declares, base64 that decodes): bad input is refused at the edge, before anything is recorded but
the refusal, never by the agent after a lease was taken for it.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from gateway.http.body import convert
from gateway.http.edge import Edge
from gateway.http.embeddings import checked_dimensions
from gateway.http.flow import Prepared, check_texts, run_capability
from gateway.http.responses import error_response
from gateway.http.stamps import request_id_of
from gateway.serving.pipeline import RequestShape, Served
from streams.codes import ServingError
from streams.contracts import (
    CONTRACTS,
    CapabilityContract,
    EmbeddingInput,
    OcrInput,
    RerankInput,
    TranscriptionInput,
    VisionEmbeddingInput,
)

_CAPABILITY = re.compile(r"[a-z0-9_.-]+@[0-9]+")


def parse_native(edge: Edge) -> Any:
    def parse(raw: Any, contract: CapabilityContract) -> Prepared:
        value = convert(raw, contract.input_type, f"{contract.capability} input")
        match value:
            case EmbeddingInput():
                shape = check_texts(value.texts, contract, "texts")
                dimensions = checked_dimensions(edge, "", value.dimensions)
                value = msgspec.structs.replace(value, dimensions=dimensions)
            case RerankInput():
                shape = check_rerank(value.query, value.documents, value.top_n, contract)
            case OcrInput():
                shape = _check_base64([value.image_base64], contract, "image_base64", listed=False)
            case VisionEmbeddingInput():
                shape = _check_base64(value.images_base64, contract, "images_base64", listed=True)
            case TranscriptionInput():
                shape = _check_base64([value.audio_base64], contract, "audio_base64", listed=False)
            case _:
                shape = RequestShape(items=1, chars=0)
        return Prepared(msgspec.json.encode(value), shape, _render(contract))

    return parse


def check_rerank(
    query: str, documents: list[str], top_n: int | None, contract: CapabilityContract
) -> RequestShape:
    """A reranking call within the contract: a query, documents, and a `top_n` of at least one
    (more than there are documents returns them all)."""
    if not query.strip():
        raise ServingError("INVALID_INPUT", "`query` must not be empty", param="query")
    longest = contract.limits.max_chars_per_item
    if longest and len(query) > longest:
        raise ServingError(
            "INVALID_INPUT", f"`query` has {len(query)} characters; at most {longest}", param="query"
        )
    shape = check_texts(documents, contract, "documents", too_large="RERANK_REQUEST_TOO_LARGE")
    if top_n is not None and top_n < 1:
        raise ServingError("INVALID_INPUT", f"`top_n` must be at least 1, not {top_n}", param="top_n")
    return shape


def _check_base64(
    items: list[str], contract: CapabilityContract, param: str, *, listed: bool
) -> RequestShape:
    """Each item decodes as the agent will decode it; `listed`: `param` is a list (named by index)."""
    if not items:
        raise ServingError("INVALID_INPUT", f"`{param}` must not be empty", param=param)
    if len(items) > contract.limits.max_items:
        raise ServingError(
            "INVALID_INPUT", f"`{param}` has {len(items)} items; at most {contract.limits.max_items}", param
        )
    for index, item in enumerate(items):
        decoded_base64(item, f"`{param}[{index}]`" if listed else f"`{param}`", param)
    return RequestShape(items=len(items), chars=sum(map(len, items)))


def decoded_base64(item: str, where: str, param: str, http_status: int | None = None) -> bytes:
    """`item`'s bytes, decoded as the agent will decode them; refused when it does not decode or
    holds nothing (`where` names it in the message)."""
    try:
        decoded = base64.b64decode(item, validate=True)
    except (binascii.Error, ValueError):
        raise ServingError(
            "INVALID_INPUT", f"{where} is not valid base64", param=param, http_status=http_status
        ) from None
    if not decoded:
        raise ServingError("INVALID_INPUT", f"{where} is empty", param=param, http_status=http_status)
    return decoded


def _render(contract: CapabilityContract) -> Any:
    def render(result: bytes, served: Served, request_id: str) -> dict[str, object]:
        return {
            "capability": contract.capability,
            "deployment_id": served.deployment_id,
            "cold_start": served.cold,
            "output": msgspec.Raw(result),
        }

    return render


def _unknown(capability: str) -> ServingError:
    known = ", ".join(sorted(CONTRACTS))
    name, _, version = capability.partition("@")
    if not _CAPABILITY.fullmatch(capability):
        message = f"{capability!r} is not a capability: name it as name@version, one of {known}"
    elif versions := sorted(c.split("@")[1] for c in CONTRACTS if c.split("@")[0] == name):
        message = f"{name} has no version {version}; it has version {', '.join(versions)}"
    else:
        message = f"unknown capability {capability!r}; known: {known}"
    return ServingError("UNKNOWN_CAPABILITY", message, param="capability")


async def invoke_capability(request: Request) -> Response:
    edge: Edge = request.app.state.edge
    capability = request.path_params["capability"]
    contract = CONTRACTS.get(capability)
    if contract is None:
        try:  # the key first, as on every client route: who may not call learns nothing more
            edge.directory.authenticate(request.headers.get("authorization"))
        except ServingError as refusal:
            return error_response(refusal, request_id_of(request))
        return error_response(_unknown(capability), request_id_of(request))
    return await run_capability(edge, request, contract, parse_native(edge))
