"""`POST /v1/capabilities/{capability}:invoke`: the typed contract, as is.

The input is checked here as the dialects check theirs (limits, `dimensions` the deployment
declares, base64 that decodes): bad input is refused at the edge, before anything is recorded but
the refusal, never by the agent after a lease was taken for it.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from gateway.http.body import JsonValue, convert
from gateway.http.checks import check_base64, check_rerank, check_texts, checked_dimensions, checked_image
from gateway.http.edge import Edge
from gateway.http.flow import Parse, Prepared, Render, Route, run_capability
from gateway.http.responses import error_response
from gateway.http.stamps import request_id_of
from gateway.serving.requests import RequestShape, Served
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


def parse_native(edge: Edge) -> Parse[JsonValue]:
    def parse(raw: JsonValue, contract: CapabilityContract, route: Route) -> Prepared:
        value = convert(raw, contract.input_type, f"{contract.capability} input")
        match value:
            case EmbeddingInput():
                shape = check_texts(value.texts, contract, "texts")
                dimensions = checked_dimensions(edge, contract.capability, route(""), value.dimensions)
                value = msgspec.structs.replace(value, dimensions=dimensions)
            case RerankInput():
                shape = check_rerank(value.query, value.documents, value.top_n, contract)
            case OcrInput():
                shape = check_base64(
                    [value.image_base64],
                    contract,
                    "image_base64",
                    listed=False,
                    each=_image_of("image_base64"),
                )
            case VisionEmbeddingInput():
                shape = check_base64(
                    value.images_base64,
                    contract,
                    "images_base64",
                    listed=True,
                    each=_image_of("images_base64"),
                )
                dimensions = checked_dimensions(edge, contract.capability, route(""), value.dimensions)
                value = msgspec.structs.replace(value, dimensions=dimensions)
            case TranscriptionInput():
                shape = check_base64([value.audio_base64], contract, "audio_base64", listed=False)
            case _:
                shape = RequestShape(items=1, chars=0)
        return Prepared(msgspec.json.encode(value), shape, _render(contract))

    return parse


def _image_of(param: str) -> Callable[[bytes, str], None]:
    def check(decoded: bytes, where: str) -> None:
        checked_image(decoded, where, param)

    return check


def _render(contract: CapabilityContract) -> Render:
    def render(result: bytes, served: Served[bytes], request_id: str) -> dict[str, object]:
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
