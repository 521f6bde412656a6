"""`GET /v1/models`: what this key may call (OpenAI's list shape, with the capability named)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from gateway.http.edge import Edge
from gateway.http.responses import error_response, json_response
from gateway.http.stamps import request_id_of
from streams.codes import ServingError
from streams.contracts import CONTRACTS


async def list_models(request: Request) -> Response:
    edge: Edge = request.app.state.edge
    try:
        principal = edge.directory.authenticate(request.headers.get("authorization"))
    except ServingError as error:
        return error_response(error, request_id_of(request))
    data = []
    for capability in sorted(principal.scopes):
        if capability not in CONTRACTS:
            continue
        deployment = edge.ctx.live.catalog.stable_for(capability)
        data.append(
            {
                "id": deployment.model_name if deployment else capability,
                "object": "model",
                "owned_by": "modelforge",
                "capability": capability,
                "available": deployment is not None,
                "dimensions": deployment.embedding_space.dimension
                if deployment and deployment.embedding_space
                else None,
            }
        )
    return json_response({"object": "list", "data": data})
