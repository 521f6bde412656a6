"""`GET /v1/models`: what this key may call, in OpenAI's list shape with the capability named: for
each capability in its scopes, the stable deployment's model name (or the capability itself while
nothing serves it, `available: false`) and the route of each active experiment it may reach."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from gateway.http.edge import Edge
from gateway.http.responses import error_response, json_response
from gateway.http.stamps import request_id_of
from gateway.promotion.model import DeploymentState
from gateway.state.catalog import Catalog
from streams.codes import ServingError
from streams.contracts import CONTRACTS


def _entry(name: str, capability: str, deployment: DeploymentState | None) -> dict[str, object]:
    space = deployment.embedding_space if deployment else None
    return {
        "id": name,
        "object": "model",
        "created": 0,  # (OpenAI's field; deployments carry no creation time of their own)
        "owned_by": "modelforge",
        "capability": capability,
        "available": deployment is not None,
        "dimensions": space.dimension if space else None,
    }


def models_of(catalog: Catalog, scopes: frozenset[str]) -> list[dict[str, object]]:
    data = []
    for capability in sorted(scopes):
        if capability not in CONTRACTS:
            continue
        stable = catalog.stable_for(capability)
        data.append(_entry(stable.model_name if stable else capability, capability, stable))
        routes = sorted(
            {d.route for d in catalog.deployments.values() if d.capability == capability and d.route}
        )
        for route in routes:
            routed = catalog.resolve(capability, route)
            if routed is not None and routed.route == route:  # an active experiment, reached by it
                data.append(_entry(route, capability, routed))
    return data


async def list_models(request: Request) -> Response:
    edge: Edge = request.app.state.edge
    try:
        principal = edge.directory.authenticate(request.headers.get("authorization"))
    except ServingError as error:
        return error_response(error, request_id_of(request))
    return json_response({"object": "list", "data": models_of(edge.ctx.live.catalog, principal.scopes)})
