"""The admin API's OpenAPI 3.1 document, written from the endpoint declarations and the msgspec
JSON schemas of their bodies, and a plain HTML page listing it (no external assets)."""

from __future__ import annotations

import html
import re
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from gateway.admin.endpoint import PREFIX, Endpoint
from gateway.http.responses import json_response

ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "error": {
            "type": "object",
            "properties": {
                "code": {"type": "string"},
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "request_id": {"type": ["string", "null"]},
                "details": {"type": "object"},
            },
            "required": ["code", "message", "type"],
        }
    },
}


def document(endpoints: list[Endpoint]) -> dict[str, Any]:
    bodies = sorted({e.body for e in endpoints if e.body is not None}, key=lambda t: t.__name__)
    refs, components = msgspec.json.schema_components(bodies, ref_template="#/components/schemas/{name}")
    ref_of = dict(zip(bodies, refs, strict=True))
    paths: dict[str, dict[str, Any]] = {}
    for e in endpoints:
        params = [
            {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
            for name in re.findall(r"{(\w+)}", e.path)
        ]
        operation: dict[str, Any] = {
            "summary": e.summary,
            "tags": [e.tag] if e.tag else [],
            "operationId": e.handler.__name__,
            "parameters": params,
            "security": [{"operator": []}],
            "responses": {
                str(e.status): {"description": "OK", "content": {"application/json": {"schema": {}}}},
                "default": {
                    "description": "An error, in the one shape",
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
                },
            },
        }
        if e.body is not None:
            operation["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": ref_of[e.body]}},
            }
        paths.setdefault(PREFIX + e.path, {})[e.method.lower()] = operation
    return {
        "openapi": "3.1.0",
        "info": {"title": "ModelForge serving admin API", "version": "1"},
        "paths": paths,
        "components": {
            "schemas": {**components, "Error": ERROR_SCHEMA},
            "securitySchemes": {"operator": {"type": "http", "scheme": "bearer"}},
        },
    }


def routes_for_docs(endpoints: list[Endpoint]) -> tuple[Any, Any]:
    spec = document(endpoints)

    async def openapi_json(request: Request) -> Response:
        return json_response(spec)

    async def docs(request: Request) -> Response:
        rows = []
        for path, operations in spec["paths"].items():
            for method, op in operations.items():
                body = (
                    op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
                )
                ref = body.get("$ref", "").rsplit("/", 1)[-1]
                link = f'<a href="#{html.escape(ref)}">{html.escape(ref)}</a>' if ref else ""
                rows.append(
                    f"<tr><td><code>{method.upper()}</code></td><td><code>{html.escape(path)}</code></td>"
                    f"<td>{html.escape(op['summary'])}</td><td>{link}</td></tr>"
                )
        schemas = "".join(
            f'<h3 id="{html.escape(name)}">{html.escape(name)}</h3><pre>'
            f"{html.escape(msgspec.json.format(msgspec.json.encode(schema)).decode())}</pre>"
            for name, schema in spec["components"]["schemas"].items()
        )
        page = (
            "<!doctype html><html><head><meta charset='utf-8'><title>ModelForge admin API</title></head><body>"
            "<h1>ModelForge serving admin API</h1><p>Authenticate with <code>Authorization: Bearer "
            "&lt;operator token&gt;</code>. Machine-readable: <a href='/openapi.json'>/openapi.json</a>.</p>"
            "<table border='1' cellpadding='4'><tr><th>method</th><th>path</th><th>what</th><th>body</th></tr>"
            + "".join(rows)
            + "</table><h2>Schemas</h2>"
            + schemas
            + "</body></html>"
        )
        return HTMLResponse(page)

    return openapi_json, docs
