"""The OpenAPI 3.1 document of every route, client and admin, written from the route declarations
(`gateway.http.operation.Operation`) and the msgspec JSON schemas of the types the routes decode
and answer with; and a plain HTML page listing it (no external assets: a gateway may have no way
out to a CDN)."""

from __future__ import annotations

import html
import re
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from gateway.http.answers import ErrorBody
from gateway.http.operation import JSON, Operation
from gateway.http.query import parameters
from gateway.http.responses import json_response
from streams.codes import ERROR_CODES

REF = "#/components/schemas/{name}"
SECURITY = {
    "client": {"type": "http", "scheme": "bearer", "description": "A client key (`mf_...`)"},
    "operator": {
        "type": "http",
        "scheme": "bearer",
        "description": "A named operator's key or MODELFORGE_OPERATOR_TOKEN",
    },
}


def _types(declared: Any) -> tuple[Any, ...]:
    if declared is None:
        return ()
    return declared if isinstance(declared, tuple) else (declared,)


def _schema(declared: Any, ref_of: dict[Any, dict[str, Any]]) -> dict[str, Any]:
    refs = [ref_of[t] for t in _types(declared)]
    return refs[0] if len(refs) == 1 else {"oneOf": refs}


ERROR = {"content": {JSON: {"schema": {"$ref": REF.format(name="ErrorBody")}}}}
# Shared by every operation: each error is in the one shape, whatever the status.
ERROR_RESPONSES = {
    "Unauthorized": {"description": "No valid bearer key (`CAPABILITY_NOT_AUTHORIZED`)", **ERROR},
    "ClientError": {"description": "Refused: the code says why (`streams.codes`)", **ERROR},
    "ServerError": {"description": "Failed or unavailable: the code says why (`streams.codes`)", **ERROR},
}


def _errors(operation: Operation) -> dict[str, Any]:
    out = {
        "4XX": {"$ref": "#/components/responses/ClientError"},
        "5XX": {"$ref": "#/components/responses/ServerError"},
    }
    if operation.security:
        out["401"] = {"$ref": "#/components/responses/Unauthorized"}
    return out


def document(operations: list[Operation]) -> dict[str, Any]:
    declared = {t for o in operations for t in (*_types(o.body), *_types(o.response))} | {ErrorBody}
    types = sorted(declared, key=repr)
    refs, components = msgspec.json.schema_components(types, ref_template=REF)
    ref_of = dict(zip(types, refs, strict=True))
    components["ErrorDetail"]["properties"]["code"]["enum"] = list(ERROR_CODES)  # the catalogue
    paths: dict[str, dict[str, Any]] = {}
    for o in operations:
        params = [
            {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
            for name in re.findall(r"{(\w+)(?::\w+)?}", o.path)
        ] + parameters(o.query)
        response: dict[str, Any] = {"description": "OK"}
        if o.response is not None:
            response["content"] = {o.response_media_type: {"schema": _schema(o.response, ref_of)}}
        operation: dict[str, Any] = {
            "summary": o.summary,
            "tags": [o.tag] if o.tag else [],
            "operationId": o.name,
            "parameters": params,
            "security": [{o.security: []}] if o.security else [],
            "responses": {str(o.status): response, **_errors(o)},
        }
        if o.body is not None:
            operation["requestBody"] = {
                "required": True,
                "content": {o.body_media_type: {"schema": _schema(o.body, ref_of)}},
            }
        paths.setdefault(_openapi_path(o.path), {})[o.method.lower()] = operation
    return {
        "openapi": "3.1.0",
        "info": {"title": "ModelForge serving API", "version": "1"},
        "paths": paths,
        "components": {"schemas": components, "responses": ERROR_RESPONSES, "securitySchemes": SECURITY},
    }


def _openapi_path(path: str) -> str:
    """Starlette's `{model:path}` is OpenAPI's `{model}`."""
    return re.sub(r"{(\w+):\w+}", r"{\1}", path)


async def openapi_json(request: Request) -> Response:
    return json_response(request.app.state.openapi)


def _link(schema: dict[str, Any]) -> str:
    names = [ref["$ref"].rsplit("/", 1)[-1] for ref in schema.get("oneOf", [schema]) if "$ref" in ref]
    return " | ".join(f'<a href="#{html.escape(n)}">{html.escape(n)}</a>' for n in names)


def _content_schema(part: dict[str, Any]) -> dict[str, Any]:
    """The schema of a request body's or response's (first) content; {} when it has none."""
    contents: list[dict[str, Any]] = list(part.get("content", {}).values())
    return contents[0].get("schema", {}) if contents else {}


def _query(op: dict[str, Any]) -> str:
    """The query parameters, each as `name` (type, bounds, default)."""
    out = []
    for p in op["parameters"]:
        if p["in"] == "query":
            schema = p["schema"]
            bounds = "–".join(str(schema[k]) for k in ("minimum", "maximum") if k in schema)
            words = [
                schema.get("type", ""),
                bounds,
                f"default {schema['default']!r}" if "default" in schema else "",
            ]
            out.append(
                f"<code>{html.escape(p['name'])}</code> ({html.escape(', '.join(w for w in words if w))})"
            )
    return "<br>".join(out)


def _row(path: str, method: str, op: dict[str, Any]) -> str:
    body = _content_schema(op.get("requestBody", {}))
    answer = _content_schema(next(iter(op["responses"].values())))
    return (
        f"<tr><td><code>{method.upper()}</code></td><td><code>{html.escape(path)}</code></td>"
        f"<td>{html.escape(op['summary'])}</td><td>{html.escape(' '.join(s for x in op['security'] for s in x))}"
        f"</td><td>{_query(op)}</td><td>{_link(body)}</td><td>{_link(answer)}</td></tr>"
    )


async def docs(request: Request) -> Response:
    spec = request.app.state.openapi
    rows = [
        _row(path, method, op)
        for path, operations in spec["paths"].items()
        for method, op in operations.items()
    ]
    schemas = "".join(
        f'<h3 id="{html.escape(name)}">{html.escape(name)}</h3><pre>'
        f"{html.escape(msgspec.json.format(msgspec.json.encode(schema)).decode())}</pre>"
        for name, schema in sorted(spec["components"]["schemas"].items())
    )
    page = (
        "<!doctype html><html><head><meta charset='utf-8'><title>ModelForge serving API</title></head><body>"
        "<h1>ModelForge serving API</h1><p>Clients authenticate with <code>Authorization: Bearer "
        "&lt;client key&gt;</code>, operators (<code>/admin/v1</code>) with their operator key. Every error "
        "is <a href='#ErrorBody'>ErrorBody</a>. Machine-readable: <a href='/openapi.json'>/openapi.json</a>.</p>"
        "<table border='1' cellpadding='4'><tr><th>method</th><th>path</th><th>what</th><th>key</th>"
        "<th>query</th><th>body</th><th>answer</th></tr>"
        + "".join(rows)
        + "</table><h2>Schemas</h2>"
        + schemas
        + "</body></html>"
    )
    return HTMLResponse(page)


DOCS_OPERATIONS = [
    Operation(
        "GET",
        "/openapi.json",
        "This document (OpenAPI 3.1)",
        openapi_json,
        tag="docs",
        response=dict[str, Any],
    ),
    Operation(
        "GET",
        "/docs",
        "This document as a page",
        docs,
        tag="docs",
        response=str,
        response_media_type="text/html",
    ),
]
