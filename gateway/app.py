"""The gateway's ASGI application: every route declared once (served, and described by the
OpenAPI document at `/openapi.json`), and the start-up that makes the edge ready."""

from __future__ import annotations

from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware

from gateway.admin.routes import admin_operations
from gateway.http import answers as a
from gateway.http.edge import Edge
from gateway.http.embeddings import OpenAIEmbeddingRequest, embeddings
from gateway.http.models import list_models, retrieve_model
from gateway.http.native import invoke_capability
from gateway.http.ocr import MistralOcrRequest, ocr
from gateway.http.openapi import DOCS_OPERATIONS, document
from gateway.http.operation import Handler, Operation
from gateway.http.ops import Awaited, healthz, metrics, readyz
from gateway.http.rerank import RerankRequest, rerank
from gateway.http.responses import routing_error
from gateway.http.stamps import ResponseStamps
from gateway.http.transcriptions import transcriptions
from streams.contracts import CONTRACTS

_RERANK = "Rerank documents against a query"


def _capability(method: str, path: str, summary: str, handler: Handler, **declared: Any) -> Operation:
    return Operation(method, path, summary, handler, tag="capabilities", security="client", **declared)


CLIENT_OPERATIONS = [
    _capability(
        "POST", "/v1/embeddings", "Embed texts, or images (Jina's items): OpenAI's API", embeddings,
        body=OpenAIEmbeddingRequest, response=a.EmbeddingAnswer,
    ),
    # Cohere v1 and Jina; v2 is what `cohere.ClientV2` calls
    _capability(
        "POST", "/v1/rerank", f"{_RERANK} (Cohere v1, Jina)", rerank, operation_id="rerank_v1",
        body=RerankRequest, response=a.RerankAnswer,
    ),
    _capability(
        "POST", "/v2/rerank", f"{_RERANK} (Cohere v2)", rerank, operation_id="rerank_v2",
        body=RerankRequest, response=a.RerankAnswer,
    ),
    _capability(
        "POST", "/v1/ocr", "Read the text of an image: Mistral's API", ocr,
        body=MistralOcrRequest, response=a.OcrAnswer,
    ),
    _capability(
        "POST", "/v1/audio/transcriptions",
        "Transcribe audio: OpenAI's API (response_format text, srt and vtt answer text/plain)", transcriptions,
        body=a.TranscriptionUpload, body_media_type="multipart/form-data", response=a.TranscriptionAnswer,
    ),
    Operation(
        "GET", "/v1/models", "The models this key may call", list_models, tag="models", security="client",
        response=a.ModelList,
    ),
    Operation(
        "GET", "/v1/models/{model:path}", "One model this key may call", retrieve_model, tag="models",
        security="client", response=a.ModelEntry,
    ),
    _capability(
        "POST", "/v1/capabilities/{capability}:invoke", "Call a capability with its typed contract input",
        invoke_capability, body=tuple(c.input_type for c in CONTRACTS.values()), response=a.INVOKE_ANSWERS,
    ),
    Operation("GET", "/healthz", "Liveness", healthz, tag="operations", response=a.Health),
    Operation(
        "GET", "/readyz", "Readiness (`?applied=N`, `?clients_applied=N`, `?peers_queued=N` wait for them)",
        readyz, tag="operations", response=a.Readiness, query=Awaited,
    ),
    Operation(
        "GET", "/metrics", "Prometheus metrics", metrics, tag="operations", response=str,
        response_media_type="text/plain",
    ),
]  # fmt: skip


def create_app(edge: Edge) -> Starlette:
    operations = [*CLIENT_OPERATIONS, *admin_operations(), *DOCS_OPERATIONS]
    app = Starlette(
        routes=[o.route() for o in operations],
        middleware=[Middleware(ResponseStamps)],
        exception_handlers={HTTPException: routing_error},
    )
    app.state.edge = edge
    app.state.openapi = document(operations)
    return app
