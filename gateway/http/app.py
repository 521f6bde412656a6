"""The gateway's ASGI application: routes, and the start-up that makes the edge ready."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.routing import Route

from gateway.admin.routes import admin_routes
from gateway.http.edge import Edge
from gateway.http.embeddings import embeddings
from gateway.http.models import list_models, retrieve_model
from gateway.http.native import invoke_capability
from gateway.http.ocr import ocr
from gateway.http.ops import healthz, metrics, readyz
from gateway.http.rerank import rerank
from gateway.http.responses import routing_error
from gateway.http.stamps import ResponseStamps
from gateway.http.transcriptions import transcriptions


def create_app(edge: Edge) -> Starlette:
    routes = [
        Route("/v1/embeddings", embeddings, methods=["POST"]),
        Route("/v1/rerank", rerank, methods=["POST"]),  # Cohere v1 and Jina
        Route("/v2/rerank", rerank, methods=["POST"]),  # Cohere v2 (what `cohere.ClientV2` calls)
        Route("/v1/ocr", ocr, methods=["POST"]),  # Mistral's (what `mistralai`'s ocr.process calls)
        Route("/v1/audio/transcriptions", transcriptions, methods=["POST"]),  # OpenAI's, multipart
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/v1/models/{model:path}", retrieve_model, methods=["GET"]),
        Route("/v1/capabilities/{capability}:invoke", invoke_capability, methods=["POST"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        *admin_routes(),
    ]
    app = Starlette(
        routes=routes,
        middleware=[Middleware(ResponseStamps)],
        exception_handlers={HTTPException: routing_error},
    )
    app.state.edge = edge
    return app
