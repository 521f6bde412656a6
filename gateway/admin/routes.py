"""Every admin route, mounted by `gateway.http.app.create_app`."""

from __future__ import annotations

from starlette.routing import Route

from gateway.admin import clients, operating, pipeline, projection, projects
from gateway.admin.console import console_routes
from gateway.admin.endpoint import Endpoint
from gateway.admin.openapi import routes_for_docs

ENDPOINTS: list[Endpoint] = [
    *pipeline.ENDPOINTS,
    *operating.ENDPOINTS,
    *projects.ENDPOINTS,
    *clients.ENDPOINTS,
    *projection.ENDPOINTS,
]


def admin_routes() -> list[Route]:
    openapi_json, docs = routes_for_docs(ENDPOINTS)
    return [
        *(e.route() for e in ENDPOINTS),
        Route("/openapi.json", openapi_json, methods=["GET"]),
        Route("/docs", docs, methods=["GET"]),
        *console_routes(),
    ]
