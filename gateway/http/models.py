"""`GET /v1/models`: what this key may call, in OpenAI's list shape with the capability named: for
each capability in its scopes, the stable deployment's model name (or the capability itself while
nothing serves it, `available: false`) and the route of each active experiment it may reach.
A key of a project-bound client may call only the capabilities its project is bound to, each
through its project's channel: one entry each, what that channel serves it by."""

from __future__ import annotations

from collections.abc import Mapping

from starlette.requests import Request
from starlette.responses import Response

from gateway.clients.bindings import STABLE
from gateway.deployments.model import DeploymentState
from gateway.http.edge import Edge
from gateway.http.responses import error_response, json_response
from gateway.http.stamps import request_id_of
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


def models_of(
    catalog: Catalog, scopes: frozenset[str], channels: Mapping[str, str] | None = None
) -> list[dict[str, object]]:
    """`channels`: the project's channel per capability for a project-bound client, else None."""
    data = []
    for capability in sorted(scopes):
        if capability not in CONTRACTS or (channels is not None and capability not in channels):
            continue
        if channels is None:
            data.append(_stable_entry(catalog, capability))
            data.extend(_routed_entries(catalog, capability, _routes_of(catalog, capability)))
        else:
            channel = channels[capability]
            routed = _routed_entries(catalog, capability, [] if channel == STABLE else [channel])
            data.extend(routed or [_stable_entry(catalog, capability)])
    return data


def _stable_entry(catalog: Catalog, capability: str) -> dict[str, object]:
    stable = catalog.stable_for(capability)
    return _entry(stable.model_name if stable else capability, capability, stable)


def _routes_of(catalog: Catalog, capability: str) -> list[str]:
    return sorted({d.route for d in catalog.deployments.values() if d.capability == capability and d.route})


def _routed_entries(catalog: Catalog, capability: str, routes: list[str]) -> list[dict[str, object]]:
    """An entry for each route that leads to an active experiment."""
    data = []
    for route in routes:
        routed = catalog.resolve(capability, route)
        if routed is not None and routed.route == route:
            data.append(_entry(route, capability, routed))
    return data


def _callable_models(request: Request) -> list[dict[str, object]]:
    edge: Edge = request.app.state.edge
    principal = edge.directory.authenticate(request.headers.get("authorization"))
    return models_of(edge.ctx.live.catalog, principal.scopes, edge.directory.channels(principal))


async def list_models(request: Request) -> Response:
    try:
        return json_response({"object": "list", "data": _callable_models(request)})
    except ServingError as error:
        return error_response(error, request_id_of(request))


async def retrieve_model(request: Request) -> Response:
    """`GET /v1/models/{model}` (the `openai` package's `models.retrieve`): the entry `GET
    /v1/models` lists under that id, or 404 MODEL_NOT_FOUND when this key may call no such model."""
    wanted = request.path_params["model"]
    try:
        entry = next((m for m in _callable_models(request) if m["id"] == wanted), None)
        if entry is None:
            raise ServingError(
                "MODEL_NOT_FOUND", f"this key may call no model {wanted!r}", param="model", http_status=404
            )
        return json_response(entry)
    except ServingError as error:
        return error_response(error, request_id_of(request))
