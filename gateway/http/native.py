"""`POST /v1/capabilities/{capability}:invoke`: the typed contract, as is."""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from gateway.http.body import convert
from gateway.http.edge import Edge
from gateway.http.flow import Prepared, check_texts, run_capability
from gateway.http.responses import error_response
from gateway.http.stamps import request_id_of
from gateway.serving.pipeline import RequestShape, Served
from streams.codes import ServingError
from streams.contracts import CONTRACTS, CapabilityContract, EmbeddingInput, RerankInput


def parse_native(raw: Any, contract: CapabilityContract) -> Prepared:
    value = convert(raw, contract.input_type, f"{contract.capability} input")
    match value:
        case EmbeddingInput():
            shape = check_texts(value.texts, contract, "texts")
        case RerankInput():
            shape = check_texts(value.documents, contract, "documents")
        case _:
            shape = RequestShape(items=1, chars=0)
    return Prepared(msgspec.json.encode(value), shape, _render(contract))


def _render(contract: CapabilityContract) -> Any:
    def render(result: bytes, served: Served, request_id: str) -> dict[str, object]:
        return {
            "capability": contract.capability,
            "deployment_id": served.deployment_id,
            "cold_start": served.cold,
            "output": msgspec.Raw(result),
        }

    return render


async def invoke_capability(request: Request) -> Response:
    edge: Edge = request.app.state.edge
    capability = request.path_params["capability"]
    contract = CONTRACTS.get(capability)
    if contract is None:
        known = ", ".join(sorted(CONTRACTS))
        return error_response(
            ServingError("UNKNOWN_CAPABILITY", f"unknown capability {capability!r}; known: {known}"),
            request_id_of(request),
        )
    return await run_capability(edge, request, contract, parse_native)
